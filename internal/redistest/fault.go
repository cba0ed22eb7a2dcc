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
// While it collects, a watchdog goroutine sleeps 1ms at a time and records
// when it woke late: the whole process stalled (a loaded machine, a GC).
// Check does not count those stalls against the decisions they overlap.
type Timings struct {
	mu     sync.Mutex
	spans  []span
	stalls []span

	watch sync.Once
	stop  chan struct{}
	done  chan struct{}
}

type span struct{ start, end time.Time }

// Time runs f and records how long it took.
func (x *Timings) Time(f func()) {
	x.watch.Do(x.startWatchdog)
	start := time.Now()
	f()
	end := time.Now()
	x.mu.Lock()
	x.spans = append(x.spans, span{start, end})
	x.mu.Unlock()
}

// stallAfter is how late the watchdog must wake to count a stall.
const stallAfter = 5 * time.Millisecond

func (x *Timings) startWatchdog() {
	x.stop, x.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(x.done)
		for {
			select {
			case <-x.stop:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			if t1 := time.Now(); t1.Sub(t0) > time.Millisecond+stallAfter {
				x.mu.Lock()
				x.stalls = append(x.stalls, span{t0.Add(time.Millisecond), t1})
				x.mu.Unlock()
			}
		}
	}()
}

// durations stops the watchdog and returns each decision's time, less the
// stalls that overlap it.
func (x *Timings) durations() (d []time.Duration, stalled time.Duration) {
	x.watch.Do(func() {})
	if x.stop != nil {
		select {
		case <-x.stop:
		default:
			close(x.stop)
		}
		<-x.done
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, s := range x.stalls {
		stalled += s.end.Sub(s.start)
	}
	for _, s := range x.spans {
		v := s.end.Sub(s.start)
		for _, st := range x.stalls {
			lo, hi := max(s.start.UnixNano(), st.start.UnixNano()), min(s.end.UnixNano(), st.end.UnixNano())
			if hi > lo {
				v -= time.Duration(hi - lo)
			}
		}
		d = append(d, v)
	}
	return d, stalled
}

// Max returns the longest decision and the 99th percentile, stalls of the
// whole process left out.
func (x *Timings) Max() (longest, p99 time.Duration) {
	s, _ := x.durations()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[len(s)-1], s[len(s)*99/100]
}

// Check fails the test when decisions took longer than bound, stalls of
// the whole process left out: more than one of them and more than 1%, or
// any by more than 200ms (the machine running the tests is shared, and a
// scheduler's stall is not the library's; a library that ignores its
// timeout exceeds it every time).
//
// Under the race detector bound grows by RaceSlack.
func (x *Timings) Check(t testing.TB, what string, bound time.Duration) {
	t.Helper()
	bound += RaceSlack
	ds, stalled := x.durations()
	over := 0
	for _, d := range ds {
		if d > bound {
			over++
		}
	}
	n := len(ds)
	longest, p99 := x.Max()
	t.Logf("%s: %d decisions, p99 %v, longest %v (bound %v; process stalls left out: %v)", what, n,
		p99.Round(time.Millisecond/10), longest.Round(time.Millisecond/10), bound, stalled.Round(time.Millisecond))
	if (over > 1 && over*100 > n) || longest > bound+200*time.Millisecond {
		t.Errorf("%s: %d of %d decisions over %v, longest %v", what, over, n, bound, longest)
	}
}
