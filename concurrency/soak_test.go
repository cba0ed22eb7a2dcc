package concurrency

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
)

var soak = flag.Int("soak", 0, "requests per soak test (default 4000 local, 3000 on Redis)")

func soakCount(def int) int {
	if *soak > 0 {
		return *soak
	}
	return def
}

// soakCounts tallies what happened to the requests of a soak.
type soakCounts struct {
	admitted, rejected, cancelled, panicked, failed, dropped atomic.Int64
	maxInFlight, maxPerKey                                   atomic.Int64
}

func (c *soakCounts) log(t *testing.T, n int) {
	t.Logf("%d requests: %d admitted (%d panicked, %d failed, %d cancelled mid-work), %d rejected, %d cancelled before admission; peak %d in flight, %d per key",
		n, c.admitted.Load(), c.panicked.Load(), c.failed.Load(), c.dropped.Load(), c.rejected.Load(), c.cancelled.Load(),
		c.maxInFlight.Load(), c.maxPerKey.Load())
}

func raise(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// drive sends n requests through the chains from 16 goroutines. Each
// request, at random: is cancelled before it starts, gets a deadline short
// enough to end during admission, is cancelled mid-work, panics (the
// panic is recovered here, outside Do, as an HTTP server would), fails, or
// completes. It records the peak in flight overall and per key.
func drive(t *testing.T, n int, chains []*shed.Chain, keys int, c *soakCounts) {
	var inFlight atomic.Int64
	perKey := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	var next atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for next.Add(1) <= int64(n) {
				chain := chains[rng.IntN(len(chains))]
				k := rng.IntN(keys)
				req := shed.Request{Key: "key" + itoa(k), Priority: shed.Priorities()[rng.IntN(shed.NumPriorities)]}
				ctx, cancel := context.WithCancel(context.Background())
				switch rng.IntN(10) {
				case 0:
					cancel()
				case 1:
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
				}
				action := rng.IntN(10)
				func() {
					defer func() {
						if p := recover(); p != nil {
							c.panicked.Add(1)
						}
					}()
					err := chain.Do(ctx, req, func(ctx context.Context) error {
						c.admitted.Add(1)
						raise(&c.maxInFlight, inFlight.Add(1))
						raise(&c.maxPerKey, perKey[k].Add(1))
						defer inFlight.Add(-1)
						defer perKey[k].Add(-1)
						for i := rng.IntN(20); i > 0; i-- {
							runtime.Gosched()
						}
						switch action {
						case 0:
							panic("handler panic")
						case 1:
							c.failed.Add(1)
							return errors.New("handler failed")
						case 2:
							c.dropped.Add(1)
							cancel()
						}
						return nil
					})
					switch {
					case errors.Is(err, shed.ErrRejected):
						c.rejected.Add(1)
					case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
						if ctx.Err() != nil && action != 2 {
							c.cancelled.Add(1)
						}
					}
				}()
				cancel()
			}
		}(uint64(g))
	}
	wg.Wait()
}

func TestSoakLocalNeverLeaks(t *testing.T) {
	perKey := mustNew(t, Config{PerKey: 3})
	overall := mustNew(t, Config{Limit: 8, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 32, MaxWait: 2 * time.Millisecond}}})
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{perKey, overall}})
	if err != nil {
		t.Fatal(err)
	}
	n := soakCount(4000)
	var c soakCounts
	drive(t, n, []*shed.Chain{chain}, 10, &c)
	c.log(t, n)
	if got := c.maxInFlight.Load(); got > 8 {
		t.Fatalf("%d in flight at once over a limit of 8", got)
	}
	if got := c.maxPerKey.Load(); got > 3 {
		t.Fatalf("%d in flight for one key over a per-key limit of 3", got)
	}
	if c.admitted.Load() == 0 || c.rejected.Load() == 0 || c.panicked.Load() == 0 || c.cancelled.Load() == 0 {
		t.Fatal("the soak did not exercise every path")
	}
	if perKey.InFlight() != 0 || overall.InFlight() != 0 || overall.queue.Len() != 0 {
		t.Fatalf("leaked: per-key layer %d, overall layer %d, queue %d", perKey.InFlight(), overall.InFlight(), overall.queue.Len())
	}
	perKey.Sweep()
	if perKey.Keys() != 0 {
		t.Fatalf("%d idle keys survive a sweep", perKey.Keys())
	}
}

func TestSoakRedisNeverLeaks(t *testing.T) {
	prefix := redistest.Prefix(t)
	ca, cb := newClient(t), newClient(t)
	cfg := RedisConfig{Config: Config{Limit: 10, PerKey: 3}, Prefix: prefix, ExpectedInstances: 2,
		Timeout: 2 * time.Second} // generous: this test is about leaks, not fallbacks
	a := mustNewRedis(t, ca, cfg)
	cfg.AsyncRelease = true // one host releases in batches
	b := mustNewRedis(t, cb, cfg)
	local := mustNew(t, Config{PerKey: 2})
	chainA, err := shed.NewChain(shed.Config{Layers: []shed.Layer{local, a}})
	if err != nil {
		t.Fatal(err)
	}
	chainB, err := shed.NewChain(shed.Config{Layers: []shed.Layer{b}})
	if err != nil {
		t.Fatal(err)
	}
	n := soakCount(3000)
	var c soakCounts
	drive(t, n, []*shed.Chain{chainA, chainB}, 8, &c)
	c.log(t, n)
	if a.Fallbacks()+b.Fallbacks() == 0 {
		if got := c.maxInFlight.Load(); got > 10 {
			t.Fatalf("%d in flight at once over a fleet limit of 10", got)
		}
		if got := c.maxPerKey.Load(); got > 3 {
			t.Fatalf("%d in flight for one key over a fleet per-key limit of 3", got)
		}
	} else {
		t.Logf("fallbacks: %d, %d", a.Fallbacks(), b.Fallbacks())
	}
	if c.admitted.Load() == 0 || c.rejected.Load() == 0 || c.panicked.Load() == 0 || c.cancelled.Load() == 0 {
		t.Fatal("the soak did not exercise every path")
	}
	if a.Held() != 0 || b.Held() != 0 || local.InFlight() != 0 || a.localLimiter().InFlight() != 0 || b.localLimiter().InFlight() != 0 {
		t.Fatalf("leaked: held %d+%d, local %d, fallback %d+%d", a.Held(), b.Held(), local.InFlight(), a.localLimiter().InFlight(), b.localLimiter().InFlight())
	}
	// Acquires cancelled while their script ran are cleaned up by the
	// renewer; Close runs that clean-up once more.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	keys, err := ca.Keys(context.Background(), "{"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if m := zcard(t, ca, k); m != 0 {
			t.Errorf("%s holds %d leases after the soak", k, m)
		}
	}
	if a.Lost()+b.Lost() != 0 {
		t.Fatalf("lost %d leases", a.Lost()+b.Lost())
	}
}
