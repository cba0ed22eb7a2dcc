package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

func newTestMemory(t testing.TB, alg Algorithm, limit Limit, cfg MemoryConfig) (*Memory, *shedtest.Clock) {
	t.Helper()
	clk := shedtest.NewClock(contractStart)
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	m, err := NewMemory(alg, limit, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, clk
}

func TestNewMemoryRejectsBadConfig(t *testing.T) {
	cases := []struct {
		alg   Algorithm
		limit Limit
		cfg   MemoryConfig
		field string
	}{
		{TokenBucket, Limit{Quantity: 0, Period: time.Second}, MemoryConfig{}, "Limit.Quantity"},
		{TokenBucket, Limit{Quantity: -5, Period: time.Second}, MemoryConfig{}, "Limit.Quantity"},
		{FixedWindow, Limit{Quantity: 5, Period: 0}, MemoryConfig{}, "Limit.Period"},
		{SlidingWindow, Limit{Quantity: 5, Period: -time.Second}, MemoryConfig{}, "Limit.Period"},
		{LeakyBucket, Limit{Quantity: 5, Period: time.Second, Burst: -1}, MemoryConfig{}, "Limit.Burst"},
		{TokenBucket, Limit{Quantity: 10, Period: 5}, MemoryConfig{}, "Quantity must not exceed Period"},
		{TokenBucket, Limit{Quantity: 1, Period: time.Hour, Burst: 1 << 40}, MemoryConfig{}, "Burst"},
		{SlidingLog, PerHour(1 << 20), MemoryConfig{}, "Limit.Quantity"},
		{Algorithm(99), PerSecond(1), MemoryConfig{}, "unknown algorithm"},
		{TokenBucket, PerSecond(1), MemoryConfig{MaxKeys: -1}, "MemoryConfig.MaxKeys"},
		{TokenBucket, PerSecond(1), MemoryConfig{IdleAfter: -time.Second}, "MemoryConfig.IdleAfter"},
	}
	for _, c := range cases {
		m, err := NewMemory(c.alg, c.limit, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("NewMemory(%v, %+v, %+v) = %v, %v; want an error naming %s", c.alg, c.limit, c.cfg, m, err, c.field)
		}
	}
}

func TestMemoryExactUnderParallelLoad(t *testing.T) {
	limit := Limit{Quantity: 500, Period: time.Minute, Burst: 500}
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			m, _ := newTestMemory(t, alg, limit, MemoryConfig{})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 200; i++ {
						r, err := m.Allow(context.Background(), "hot", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != limit.Quantity {
				t.Fatalf("admitted %d of 1600 at one instant, want exactly %d", got, limit.Quantity)
			}
		})
	}
}

func TestMemorySweepsKeysAtRest(t *testing.T) {
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			m, clk := newTestMemory(t, alg, PerSecond(10), MemoryConfig{IdleAfter: 5 * time.Second})
			ctx := context.Background()
			for i := 0; i < 100; i++ {
				if _, err := m.Allow(ctx, fmt.Sprint("idle-", i), 1); err != nil {
					t.Fatal(err)
				}
			}
			if m.Len() != 100 {
				t.Fatalf("Len = %d, want 100", m.Len())
			}
			// keep one key busy across the sweeps
			for i := 0; i < 30; i++ {
				clk.Advance(500 * time.Millisecond)
				m.Allow(ctx, "busy", 1)
			}
			if got := m.Len(); got != 1 {
				t.Fatalf("after 15s, Len = %d, want 1 (only the busy key)", got)
			}
			// a swept key starts over exactly as a new one
			r, _ := m.Allow(ctx, "idle-1", 10)
			if !r.Allowed || r.Remaining != 0 {
				t.Fatalf("swept key: %+v, want a full limit", r)
			}
			m.Close()
			if n := clk.Pending(); n != 0 {
				t.Fatalf("%d timers pending after Close, want 0", n)
			}
		})
	}
}

func TestMemoryMaxKeysBounds(t *testing.T) {
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			m, clk := newTestMemory(t, alg, PerSecond(2), MemoryConfig{MaxKeys: 64})
			ctx := context.Background()
			for i := 0; i < 5000; i++ {
				m.Allow(ctx, fmt.Sprint("k", i), 1)
				if i%50 != 0 {
					continue
				}
				if n := m.Len(); n > 64 {
					t.Fatalf("after %d keys, Len = %d > MaxKeys 64", i+1, n)
				}
			}
			if _, err := m.Allow(ctx, "k4999", 1); err != nil {
				t.Fatal(err)
			}
			_ = clk
		})
	}
}

func TestMemoryRetiredCellIsRetried(t *testing.T) {
	// A decision that finds a cell just retired (swept or evicted) must be
	// made on the key's new cell, not lost on the old one.
	p := newParams(PerSecond(4))
	var g gcraCell
	g.init(&p, 0)
	if !g.retire(&p, 0, 0, true) {
		t.Fatal("retire(force) = false")
	}
	if _, ok := g.take(&p, 0, 1); ok {
		t.Fatal("take on a retired gcra cell succeeded")
	}
	var f fixedCell
	f.init(&p, 0)
	f.retire(&p, 0, 0, true)
	if _, ok := f.take(&p, 0, 1); ok || f.giveBack(&p, 0, 1) {
		t.Fatal("fixed cell answered after retirement")
	}
	var s slidingCell
	s.init(&p, 0)
	s.retire(&p, 0, 0, true)
	if _, ok := s.take(&p, 0, 1); ok {
		t.Fatal("sliding cell answered after retirement")
	}
	var l logCell
	l.init(&p, 0)
	l.retire(&p, 0, 0, true)
	if _, ok := l.take(&p, 0, 1); ok {
		t.Fatal("log cell answered after retirement")
	}
}

func TestMemoryConcurrentSweepAndEviction(t *testing.T) {
	// For the race detector: decisions, refunds, sweeps and evictions at once.
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			m, clk := newTestMemory(t, alg, PerSecond(5), MemoryConfig{MaxKeys: 32, IdleAfter: time.Second})
			var wg sync.WaitGroup
			stop := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						clk.Advance(100 * time.Millisecond)
						m.Sweep()
					}
				}
			}()
			var workers sync.WaitGroup
			for g := 0; g < 4; g++ {
				workers.Add(1)
				go func(g int) {
					defer workers.Done()
					for i := 0; i < 2000; i++ {
						key := fmt.Sprint(i % 97)
						if _, err := m.Allow(context.Background(), key, 1); err != nil {
							t.Error(err)
							return
						}
						if i%3 == 0 {
							m.Refund(context.Background(), key, 1)
						}
					}
				}(g)
			}
			workers.Wait()
			close(stop)
			wg.Wait()
			if n := m.Len(); n > 32 {
				t.Fatalf("Len = %d > MaxKeys", n)
			}
		})
	}
}

func TestMemoryKeysAreNotConfused(t *testing.T) {
	m, _ := newTestMemory(t, FixedWindow, PerSecond(1), MemoryConfig{})
	ctx := context.Background()
	long := strings.Repeat("x", 100_000)
	keys := []string{long, long + "x", long[1:], digestKey(long), "#", "a b", "a\nb", "{a}", "a", "a\x00"}
	for _, k := range keys {
		r, err := m.Allow(ctx, k, 1)
		if err != nil || !r.Allowed {
			t.Fatalf("first request on key %.30q: %+v %v; it shares another key's state", k, r, err)
		}
	}
	for _, k := range keys {
		if r, _ := m.Allow(ctx, k, 1); r.Allowed {
			t.Fatalf("second request on key %.30q allowed", k)
		}
	}
}

func TestMemoryRefundOnUnknownKeyIsHarmless(t *testing.T) {
	for _, alg := range allAlgs {
		m, _ := newTestMemory(t, alg, PerSecond(3), MemoryConfig{})
		if err := m.Refund(context.Background(), "never-seen", 2); err != nil {
			t.Fatal(err)
		}
		if err := m.Refund(context.Background(), "", 1); !errors.Is(err, ErrEmptyKey) {
			t.Fatalf("Refund(empty key) = %v", err)
		}
		if r, _ := m.Allow(context.Background(), "never-seen", 3); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%v: after a refund on a new key: %+v, want exactly the limit", alg, r)
		}
	}
}

func TestMemorySystemClock(t *testing.T) {
	m, err := NewMemory(TokenBucket, PerMinute(2), MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, _ := m.Allow(context.Background(), "k", 2)
	b, _ := m.Allow(context.Background(), "k", 1)
	if !a.Allowed || b.Allowed || b.RetryAfter <= 0 || b.RetryAfter > 30*time.Second {
		t.Fatalf("system clock: %+v then %+v", a, b)
	}
}

func TestMemoryNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, alg := range allAlgs {
		// Time stands still (advancing the test clock allocates): the limit
		// runs out half way, so both the allow and the deny paths are measured.
		m, _ := newTestMemory(t, alg, PerHour(1000), MemoryConfig{})
		ctx := context.Background()
		m.Allow(ctx, "k", 1)
		n := testing.AllocsPerRun(1000, func() {
			m.Allow(ctx, "k", 1)
			m.Refund(ctx, "k", 1)
			m.Allow(ctx, "k", 1)
		})
		if n != 0 {
			t.Errorf("%v: %v allocations per decision on an existing key, want 0", alg, n)
		}
	}
}

// TestMemoryBytesPerKey measures the heap one key costs (the figure doc.go
// gives) and fails when it grows well past it.
func TestMemoryBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100k keys")
	}
	bounds := map[Algorithm]float64{TokenBucket: 70, LeakyBucket: 70, FixedWindow: 135, SlidingWindow: 170, SlidingLog: 360}
	for _, alg := range allAlgs {
		n := 100_000
		if raceEnabled {
			n = 20_000 // the same figure, in a fifth of the time
		}
		perKey := bytesPerKey(t, alg, n)
		t.Logf("%v: %.0f bytes per key", alg, perKey)
		if perKey > bounds[alg] {
			t.Errorf("%v: %.0f bytes per key, documented bound %v", alg, perKey, bounds[alg])
		}
	}
}

func bytesPerKey(t testing.TB, alg Algorithm, n int) float64 {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%09d", i) // 16 bytes
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := NewMemory(alg, PerMinute(100), MemoryConfig{Clock: shedtest.NewClock(contractStart)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		m.Allow(context.Background(), k, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if m.Len() != n {
		t.Fatalf("Len = %d, want %d", m.Len(), n)
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(keys) // else freeing them would offset the figure
	m.Close()
	// Signed: a heap that shrank meanwhile (another test's garbage freed)
	// reads low, not as a wrapped-around huge figure.
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

func TestMemoryExtremeLimitsDoNotOverflow(t *testing.T) {
	// The largest limits ValidateFor accepts, driven to their bounds: the
	// figures stay non-negative and a full burst is still admitted.
	cases := []struct {
		alg   Algorithm
		limit Limit
	}{
		{TokenBucket, Limit{Quantity: 1, Period: time.Duration(maxTolerance), Burst: 1}},
		{LeakyBucket, Limit{Quantity: 1 << 20, Period: time.Duration(maxTolerance), Burst: 1 << 20}},
		{FixedWindow, Limit{Quantity: 1 << 62, Period: time.Duration(maxTolerance / 2)}},
		{SlidingWindow, Limit{Quantity: 1 << 62, Period: time.Duration(maxTolerance / 2)}},
		{SlidingLog, Limit{Quantity: MaxSlidingLogQuantity, Period: time.Duration(maxTolerance)}},
	}
	for _, c := range cases {
		m, clk := newTestMemory(t, c.alg, c.limit, MemoryConfig{})
		clk.Set(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
		max := c.limit.MaxCost(c.alg)
		for _, cost := range []int64{max, 1, max} {
			r, err := m.Allow(context.Background(), "k", cost)
			if err != nil || r.Remaining < 0 || r.RetryAfter < 0 || r.ResetAfter < 0 {
				t.Fatalf("%v %v cost %d: %+v %v", c.alg, c.limit, cost, r, err)
			}
		}
		if err := m.Refund(context.Background(), "k", max); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMemoryExactWhileTablesGrow decides on one hot key from several
// goroutines while others add keys, so the hot key's shard is rebuilt
// under its feet: no decision may be lost or counted twice.
func TestMemoryExactWhileTablesGrow(t *testing.T) {
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			const limit = 3000
			m, _ := newTestMemory(t, alg, Limit{Quantity: limit, Period: time.Hour, Burst: limit}, MemoryConfig{MaxKeys: 1 << 16})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for i := 0; i < 1000; i++ {
						if r, _ := m.Allow(context.Background(), "hot", 1); r.Allowed {
							admitted.Add(1)
						}
					}
				}()
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 1000; i++ {
						m.Allow(context.Background(), fmt.Sprint(g, "-", i), 1)
					}
				}(g)
			}
			wg.Wait()
			// 4000 keys over 256 shards of 256: tables grow, none is full,
			// so nothing is evicted and the count is exact.
			got := admitted.Load()
			if got != limit {
				r, _ := m.Allow(context.Background(), "hot", 1)
				t.Fatalf("admitted %d on the hot key, want %d (now: %+v)", got, limit, r)
			}
		})
	}
}
