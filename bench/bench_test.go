package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/sync/semaphore"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// These tests check that the comparison compares like with like: under the
// same fixed limit, every adapter admits exactly as many requests as the
// limit says, and the tools the benchmarks read (the round-trip hook, the
// writers) count what they claim to. They measure no time.

// countAllowed asks d for key n times and returns how many were admitted.
func countAllowed(d Decider, key string, n int) int {
	allowed := 0
	for range n {
		if d.Allow(key) {
			allowed++
		}
	}
	return allowed
}

func TestRatePeersAdmitExactlyN(t *testing.T) {
	const n, extra = 20, 7
	// A day per limit: the buckets refill one unit every 72 minutes, so the
	// test never sees a refill; a window edge would reset the window
	// algorithms, so the test reruns once if a day boundary passed.
	const period = 24 * time.Hour
	for _, p := range RatePeers() {
		if p.Blocking {
			continue // never says no: see TestUberPaces
		}
		t.Run(p.Name, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				day := time.Now().Truncate(period)
				d, err := p.New(n, period)
				if err != nil {
					t.Fatal(err)
				}
				a, b := countAllowed(d, "alice", n+extra), -1
				if p.Keyed {
					b = countAllowed(d, "bob", n+extra)
				}
				_ = d.Close()
				if !time.Now().Truncate(period).Equal(day) && attempt == 0 {
					continue
				}
				if a != n {
					t.Errorf("alice: %d of %d admitted under a limit of %d", a, n+extra, n)
				}
				if p.Keyed && b != n {
					t.Errorf("bob, after alice spent her limit: %d of %d admitted, want %d (keys must not share a limit)", b, n+extra, n)
				}
				return
			}
		})
	}
}

// fakeClock is uber-go/ratelimit's Clock whose Sleep moves Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestUberPaces checks that the uber adapter, which always admits, spaces
// takes at the configured rate instead: it is the same limit, enforced by
// waiting.
func TestUberPaces(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	start := clk.Now()
	u := NewUber(10, time.Second, clk)
	const takes = 25
	if got := countAllowed(u, "any", takes); got != takes {
		t.Fatalf("%d of %d takes admitted; Take never refuses", got, takes)
	}
	if waited, want := clk.Now().Sub(start), (takes-1)*100*time.Millisecond; waited != want {
		t.Errorf("%d takes at 10/s waited %v, want %v", takes, waited, want)
	}
}

// TestRowApplies pins which peers the tables compare on which rows.
func TestRowApplies(t *testing.T) {
	rows := map[string]int{}
	for _, p := range RatePeers() {
		for _, allow := range []bool{true, false} {
			for _, nkeys := range []int{1, manyKeys} {
				if rowApplies(p, allow, nkeys) {
					rows[p.Name]++
				}
			}
		}
	}
	want := map[string]int{
		"loadshed-token": 4, "loadshed-gcra": 4, "loadshed-fixed": 4, "loadshed-sliding": 4, "loadshed-log": 2,
		"xrate-one": 2, "xrate-sharded": 4, "httprate": 4, "golimiter": 4, "uber": 1,
	}
	for name, n := range want {
		if rows[name] != n {
			t.Errorf("%s is on %d rows (of allow/deny × keys), want %d", name, rows[name], n)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("peers %v, want %v", rows, want)
	}
}

func TestConcurrencyPeersHoldN(t *testing.T) {
	const n = 5
	ctx := context.Background()
	t.Run("loadshed", func(t *testing.T) {
		l, err := concurrency.New(concurrency.Config{Limit: n})
		if err != nil {
			t.Fatal(err)
		}
		leases := make([]shed.Lease, n)
		for i := range leases {
			if leases[i], err = l.Acquire(ctx, shed.Request{Key: "k"}); err != nil {
				t.Fatalf("acquire %d of %d: %v", i+1, n, err)
			}
		}
		if ls, err := l.Acquire(ctx, shed.Request{Key: "k"}); err == nil {
			ls.Release(shed.Completed)
			t.Fatalf("acquire %d admitted over a limit of %d", n+1, n)
		}
		leases[0].Release(shed.Completed)
		ls, err := l.Acquire(ctx, shed.Request{Key: "k"})
		if err != nil {
			t.Fatalf("acquire after a release: %v", err)
		}
		ls.Release(shed.Completed)
		for i := 1; i < n; i++ {
			leases[i].Release(shed.Completed)
		}
		if got := l.InFlight(); got != 0 {
			t.Errorf("in flight after every release: %d", got)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		s := semaphore.NewWeighted(n)
		for i := range n {
			if !s.TryAcquire(1) {
				t.Fatalf("acquire %d of %d failed", i+1, n)
			}
		}
		if s.TryAcquire(1) {
			t.Fatalf("acquire %d admitted over a limit of %d", n+1, n)
		}
		s.Release(1)
		if !s.TryAcquire(1) {
			t.Fatal("acquire after a release failed")
		}
	})
}

// TestHTTPConcurrencyHoldsN holds n requests inside the handler behind chi's
// Throttle and behind loadshed's middleware, each with a limit of n, and
// checks that request n+1 is refused (429 from chi, 503 from loadshed's
// service-wide limit) and that one finishing lets the next in.
func TestHTTPConcurrencyHoldsN(t *testing.T) {
	const n = 4
	for _, tc := range []struct {
		name   string
		wrap   func(http.Handler) (http.Handler, func())
		refuse int
	}{
		{"chi-throttle", func(h http.Handler) (http.Handler, func()) { return middleware.Throttle(n)(h), func() {} }, http.StatusTooManyRequests},
		{"loadshed-concurrency", func(h http.Handler) (http.Handler, func()) {
			s, stop, err := NewShedHandler(ShedStack{Concurrency: &concurrency.Config{Limit: n}}, h)
			if err != nil {
				t.Fatal(err)
			}
			return s, stop
		}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			block := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/block" {
					entered <- struct{}{}
					<-release
				}
				OKHandler(w, r)
			})
			h, stop := tc.wrap(block)
			defer stop()
			serve := func(path string) int {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
				return w.Code
			}
			codes := make(chan int, n)
			for range n {
				go func() { codes <- serve("/block") }()
				<-entered
			}
			if got := serve("/ok"); got != tc.refuse {
				t.Errorf("request %d with %d in flight: status %d, want %d", n+1, n, got, tc.refuse)
			}
			release <- struct{}{}
			if got := <-codes; got != http.StatusOK {
				t.Errorf("held request: status %d", got)
			}
			if got := serve("/ok"); got != http.StatusOK {
				t.Errorf("request after one finished: status %d, want 200", got)
			}
			close(release)
			for range n - 1 {
				if got := <-codes; got != http.StatusOK {
					t.Errorf("held request: status %d", got)
				}
			}
		})
	}
}

// TestChainAdmitsN sends n+k requests from one client through the
// ratelimit+concurrency stack the chain benchmark measures: n pass, k are
// refused with 429, and another client still has its own n.
func TestChainAdmitsN(t *testing.T) {
	const n, extra = 10, 5
	rl := ratelimit.Per(n, 24*time.Hour)
	h, stop, err := NewShedHandler(ShedStack{RateLimit: &rl, Concurrency: &concurrency.Config{Limit: 100, PerKey: 10}}, http.HandlerFunc(OKHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, addr := range []string{"192.0.2.1:1000", "192.0.2.2:1000"} {
		codes := map[int]int{}
		for range n + extra {
			r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
			r.RemoteAddr = addr
			d := NewDiscardWriter()
			h.ServeHTTP(d, r)
			codes[d.Status()]++
		}
		if codes[http.StatusOK] != n || codes[http.StatusTooManyRequests] != extra {
			t.Errorf("client %s: statuses %v, want %d × 200 and %d × 429", addr, codes, n, extra)
		}
	}
}

func TestDiscardWriter(t *testing.T) {
	d := NewDiscardWriter()
	d.Header().Set("A", "1")
	if len(d.Header()) != 0 {
		t.Error("Header must start empty for each request")
	}
	OKHandler(d, nil)
	if d.Status() != http.StatusOK {
		t.Errorf("status %d after OKHandler", d.Status())
	}
	d.Reset()
	if _, _ = d.Write([]byte("x")); d.Status() != http.StatusOK {
		t.Errorf("a write without WriteHeader must read as 200, got %d", d.Status())
	}
}
