package redistest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/faultproxy"
)

// ProxiedClient returns a client of addr through a fault proxy, with
// ContextTimeoutEnabled and go-redis's default retries (as a user's client
// would have), both closed when the test ends.
func ProxiedClient(t testing.TB, addr string) (*redis.Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second})
	t.Cleanup(func() {
		c.Close()
		p.Close()
	})
	return c, p
}

// Timings collects how long decisions took, from concurrent goroutines.
type Timings struct {
	mu sync.Mutex
	d  []time.Duration
}

// Time runs f and records how long it took.
func (x *Timings) Time(f func()) {
	start := time.Now()
	f()
	d := time.Since(start)
	x.mu.Lock()
	x.d = append(x.d, d)
	x.mu.Unlock()
}

// Max returns the longest decision and the 99th percentile.
func (x *Timings) Max() (longest, p99 time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.d) == 0 {
		return 0, 0
	}
	s := slices.Clone(x.d)
	slices.Sort(s)
	return s[len(s)-1], s[len(s)*99/100]
}

// Check fails the test when decisions took longer than bound: more than
// one of them and more than 1%, or any by more than 200ms (the machine
// running the tests is shared, and a scheduler's stall is not the
// library's; a library that ignores its timeout exceeds it every time).
//
// Under the race detector bound grows by RaceSlack.
func (x *Timings) Check(t testing.TB, what string, bound time.Duration) {
	t.Helper()
	bound += RaceSlack
	x.mu.Lock()
	over := 0
	for _, d := range x.d {
		if d > bound {
			over++
		}
	}
	n := len(x.d)
	x.mu.Unlock()
	longest, p99 := x.Max()
	t.Logf("%s: %d decisions, p99 %v, longest %v (bound %v)", what, n, p99.Round(time.Millisecond/10), longest.Round(time.Millisecond/10), bound)
	if (over > 1 && over*100 > n) || longest > bound+200*time.Millisecond {
		t.Errorf("%s: %d of %d decisions over %v, longest %v", what, over, n, bound, longest)
	}
}
