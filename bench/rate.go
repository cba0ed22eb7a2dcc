package bench

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	uberrate "go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/loadshed/loadshed/ratelimit"
)

// Decider is one rate limiter's decision for one unit of one key, the work
// every in-memory benchmark row measures. Every limiter, loadshed's and the
// peers', is called through this one interface, so each pays the same
// dynamic call.
type Decider interface {
	// Allow reports whether one unit may be taken for key now.
	Allow(key string) bool
	// Close releases the limiter's background work (sweepers).
	Close() error
}

// RatePeer builds one limiter for the comparison.
type RatePeer struct {
	// Name identifies the limiter in benchmark names.
	Name string
	// Keyed is false for a limiter that has no keys (every key shares one
	// limit): it is measured on the hot-key rows only.
	Keyed bool
	// Blocking is true for a limiter that waits instead of saying no
	// (uber-go/ratelimit): it is measured on the allow rows only.
	Blocking bool
	// Log is true for the sliding log, whose memory grows with the units
	// admitted (up to ratelimit.MaxSlidingLogQuantity per key): it is
	// measured on the deny rows only.
	Log bool
	// New returns a limiter of n units per period per key, burst n.
	New func(n int64, period time.Duration) (Decider, error)
}

// RatePeers returns loadshed's five algorithms and the peers, in the order
// the tables show them.
func RatePeers() []RatePeer {
	peers := []RatePeer{}
	for _, a := range []struct {
		name string
		alg  ratelimit.Algorithm
	}{
		{"loadshed-token", ratelimit.TokenBucket},
		{"loadshed-gcra", ratelimit.LeakyBucket},
		{"loadshed-fixed", ratelimit.FixedWindow},
		{"loadshed-sliding", ratelimit.SlidingWindow},
		{"loadshed-log", ratelimit.SlidingLog},
	} {
		alg := a.alg
		peers = append(peers, RatePeer{Name: a.name, Keyed: true, Log: alg == ratelimit.SlidingLog,
			New: func(n int64, period time.Duration) (Decider, error) { return NewLoadshedMemory(alg, n, period) }})
	}
	return append(peers,
		RatePeer{Name: "xrate-one", New: func(n int64, period time.Duration) (Decider, error) {
			return NewXRateOne(n, period), nil
		}},
		RatePeer{Name: "xrate-sharded", Keyed: true, New: func(n int64, period time.Duration) (Decider, error) {
			return NewXRateSharded(n, period), nil
		}},
		RatePeer{Name: "httprate", Keyed: true, New: func(n int64, period time.Duration) (Decider, error) {
			return NewHTTPRate(n, period), nil
		}},
		RatePeer{Name: "golimiter", Keyed: true, New: func(n int64, period time.Duration) (Decider, error) {
			return NewGoLimiter(n, period)
		}},
		RatePeer{Name: "uber", Blocking: true, New: func(n int64, period time.Duration) (Decider, error) {
			return NewUber(n, period, nil), nil
		}},
	)
}

// LoadshedMemory is loadshed's in-memory store, one unit per decision.
type LoadshedMemory struct{ m *ratelimit.Memory }

// NewLoadshedMemory returns a ratelimit.Memory of n units per period
// (burst n) under alg, with the default configuration.
func NewLoadshedMemory(alg ratelimit.Algorithm, n int64, period time.Duration) (*LoadshedMemory, error) {
	m, err := ratelimit.NewMemory(alg, ratelimit.Per(n, period), ratelimit.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	return &LoadshedMemory{m: m}, nil
}

// Allow takes one unit for key.
func (l *LoadshedMemory) Allow(key string) bool {
	r, err := l.m.Allow(context.Background(), key, 1)
	return err == nil && r.Allowed
}

// Close stops the store's sweeper.
func (l *LoadshedMemory) Close() error { return l.m.Close() }

// XRateOne is a single golang.org/x/time/rate Limiter that ignores the key:
// the cheapest x/time/rate can be, with no key lookup at all. It is the
// reference for the hot-key target.
type XRateOne struct{ l *rate.Limiter }

// NewXRateOne returns one rate.Limiter of n per period, burst n.
func NewXRateOne(n int64, period time.Duration) *XRateOne {
	return &XRateOne{l: rate.NewLimiter(rate.Limit(float64(n)/period.Seconds()), int(n))}
}

// Allow ignores key.
func (x *XRateOne) Allow(string) bool { return x.l.Allow() }

// Close does nothing.
func (x *XRateOne) Close() error { return nil }

// xrateShards is the number of shards of XRateSharded, a power of two.
const xrateShards = 256

// XRateSharded gives each key its own *rate.Limiter, kept in a map split
// into 256 shards chosen by a maphash of the key, each behind its own
// RWMutex: a read-locked lookup, and a double-checked insert under the write
// lock on a miss (the layout of sethvargo/go-limiter's store, sharded). It is
// how one would build a per-key limiter on x/time/rate without a global lock.
type XRateSharded struct {
	seed   maphash.Seed
	limit  rate.Limit
	burst  int
	shards [xrateShards]xrateShard
}

type xrateShard struct {
	mu sync.RWMutex
	m  map[string]*rate.Limiter
	_  [32]byte // 24 (RWMutex) + 8 (map) + 32: a shard per 64-byte cache line
}

// NewXRateSharded returns a per-key x/time/rate limiter of n per period,
// burst n.
func NewXRateSharded(n int64, period time.Duration) *XRateSharded {
	x := &XRateSharded{seed: maphash.MakeSeed(), limit: rate.Limit(float64(n) / period.Seconds()), burst: int(n)}
	for i := range x.shards {
		x.shards[i].m = make(map[string]*rate.Limiter)
	}
	return x
}

// Allow takes one token from key's limiter, creating it on first use.
func (x *XRateSharded) Allow(key string) bool {
	s := &x.shards[maphash.String(x.seed, key)&(xrateShards-1)]
	s.mu.RLock()
	l, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		s.mu.Lock()
		if l, ok = s.m[key]; !ok {
			l = rate.NewLimiter(x.limit, x.burst)
			s.m[key] = l
		}
		s.mu.Unlock()
	}
	return l.Allow()
}

// Close does nothing: the map is never swept.
func (x *XRateSharded) Close() error { return nil }

// HTTPRate is go-chi/httprate's RateLimiter (a sliding window counter over
// its in-memory LimitCounter), asked through OnLimit, the call its
// middleware makes for every request once it has the key. Response headers
// are switched off (WithResponseHeaders with empty names), so that what is
// measured is the decision, not header writing; OnLimit still formats the
// limit and the reset time it would write. The writer is a reusable one that
// keeps nothing; the request is a fixed one, read for its context.
type HTTPRate struct {
	rl *httprate.RateLimiter
	w  *DiscardWriter
	r  *http.Request
}

// NewHTTPRate returns an httprate.RateLimiter of n per period.
func NewHTTPRate(n int64, period time.Duration) *HTTPRate {
	rl := httprate.NewRateLimiter(int(n), period, httprate.WithResponseHeaders(httprate.ResponseHeaders{}))
	return &HTTPRate{rl: rl, w: NewDiscardWriter(), r: httptest.NewRequest(http.MethodGet, "/", nil)}
}

// Allow asks OnLimit for key. The writer and request are shared by every
// goroutine: with no header names set OnLimit never touches the writer, and
// it only reads the request's context.
func (h *HTTPRate) Allow(key string) bool { return !h.rl.OnLimit(h.w, h.r, key) }

// Close does nothing: httprate's local counter has no goroutine.
func (h *HTTPRate) Close() error { return nil }

// GoLimiter is sethvargo/go-limiter's memorystore: a map behind one RWMutex
// (read-locked lookup, double-checked insert), a mutex per bucket, and a
// token bucket that refills by ticks of the interval.
type GoLimiter struct{ s limiter.Store }

// NewGoLimiter returns a memorystore of n tokens per period.
func NewGoLimiter(n int64, period time.Duration) (*GoLimiter, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(n), Interval: period})
	if err != nil {
		return nil, fmt.Errorf("bench: memorystore.New: %w", err)
	}
	return &GoLimiter{s: s}, nil
}

// Allow takes one token for key.
func (g *GoLimiter) Allow(key string) bool {
	_, _, _, ok, err := g.s.Take(context.Background(), key)
	return err == nil && ok
}

// Close stops the store's sweeper.
func (g *GoLimiter) Close() error { return g.s.Close(context.Background()) }

// Uber is uber-go/ratelimit: one limiter (no keys) whose Take blocks until
// the next unit is due and never says no. It is comparable only on the
// allow rows of one hot key, with a rate high enough that Take never sleeps:
// there it measures the same bookkeeping as a decision that admits.
type Uber struct{ l uberrate.Limiter }

// NewUber returns an uber-go/ratelimit limiter of n per period. clock, when
// not nil, replaces the real clock (for tests).
func NewUber(n int64, period time.Duration, clock uberrate.Clock) *Uber {
	opts := []uberrate.Option{uberrate.Per(period)}
	if clock != nil {
		opts = append(opts, uberrate.WithClock(clock))
	}
	return &Uber{l: uberrate.New(int(n), opts...)}
}

// Allow calls Take, which waits for its turn, and always reports true.
func (u *Uber) Allow(string) bool {
	u.l.Take()
	return true
}

// Close does nothing.
func (u *Uber) Close() error { return nil }
