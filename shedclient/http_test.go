package shedclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedclient/internal/instantclock"
)

// server answers with answer(n) for its n-th request (from 0) and counts.
type server struct {
	n      atomic.Int64
	answer func(n int64, w http.ResponseWriter, r *http.Request)
	*httptest.Server
}

func newServer(t *testing.T, answer func(n int64, w http.ResponseWriter, r *http.Request)) *server {
	s := &server{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.answer(s.n.Add(1)-1, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string) (int, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestQuotaSpentHoldsRequestsBack(t *testing.T) {
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("RateLimit-Policy", `"per-key";q=10;w=60`)
			w.Header().Set("RateLimit", `"per-key";r=0;t=30`)
		}
	})
	clock := instantclock.New()
	c := &http.Client{Transport: shedclient.New(shedclient.Config{Clock: clock, NoWait: true}).Transport(nil)}
	if code, err := get(t, c, context.Background(), srv.URL); err != nil || code != 200 {
		t.Fatalf("first request: %v %v", code, err)
	}
	_, err := get(t, c, context.Background(), srv.URL)
	var qe *shedclient.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, shedclient.ErrThrottled) || qe.Policy != "per-key" || qe.RetryAfter != 30*time.Second {
		t.Fatalf("second request: %v", err)
	}
	if n := srv.n.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want 1: the second must not be sent", n)
	}
	clock.Advance(30 * time.Second)
	if code, err := get(t, c, context.Background(), srv.URL); err != nil || code != 200 {
		t.Fatalf("after the reset: %v %v", code, err)
	}
}

func TestQuotaSpentWaitsWithinDeadline(t *testing.T) {
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	clock := instantclock.New()
	c := &http.Client{Transport: shedclient.New(shedclient.Config{Clock: clock, RetryBudget: -1, K: -1}).Transport(nil)}
	if code, _ := get(t, c, context.Background(), srv.URL); code != 429 {
		t.Fatalf("first: %d", code)
	}
	// 2s left of the quota: a request with 1s to live fails at once...
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(time.Second))
	defer cancel()
	if _, err := get(t, c, ctx, srv.URL); !errors.Is(err, shedclient.ErrThrottled) {
		t.Fatalf("short deadline: %v", err)
	}
	// ...one with no deadline waits the 2s, then is sent.
	if code, err := get(t, c, context.Background(), srv.URL); err != nil || code != 200 {
		t.Fatalf("no deadline: %d %v", code, err)
	}
	if w := clock.Waits(); len(w) != 1 || w[0] != 2*time.Second {
		t.Fatalf("waited %v, want [2s]", w)
	}
}

func TestAdaptiveThrottlingPerPriority(t *testing.T) {
	// The server sheds every sheddable request and takes every critical one.
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(propagation.PriorityHeader) == "sheddable" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	c := &http.Client{Transport: shedclient.New(shedclient.Config{RetryBudget: -1}).Transport(nil)}
	sheddable := shed.WithPriority(context.Background(), shed.Sheddable)
	critical := shed.WithPriority(context.Background(), shed.Critical)
	throttled := 0
	for range 200 {
		if _, err := get(t, c, sheddable, srv.URL); errors.Is(err, shedclient.ErrThrottled) {
			var te *shedclient.ThrottleError
			if !errors.As(err, &te) || te.Priority != shed.Sheddable {
				t.Fatalf("%v", err)
			}
			throttled++
		}
		if code, err := get(t, c, critical, srv.URL); err != nil || code != 200 {
			t.Fatalf("a critical request: %d %v", code, err)
		}
	}
	// With no accepts, p = n/(n+1): nearly everything after the first few
	// is kept back.
	if sent := srv.n.Load() - 200; sent > 20 || throttled < 180 {
		t.Fatalf("sheddable: %d sent, %d throttled of 200", sent, throttled)
	}
}

func TestRetryBudgetAndIdempotency(t *testing.T) {
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	clock := instantclock.New()
	client := shedclient.New(shedclient.Config{Clock: clock, K: -1})
	c := &http.Client{Transport: client.Transport(nil)}
	for range 100 {
		if code, err := get(t, c, context.Background(), srv.URL); err != nil || code != 503 {
			t.Fatalf("%d %v", code, err)
		}
	}
	// 100 requests, retries at most 10% of them.
	if n := srv.n.Load(); n < 105 || n > 110 {
		t.Fatalf("server saw %d requests for 100 sent, want 105..110", n)
	}
	// A POST is not retried...
	before := srv.n.Load()
	clock.Advance(time.Hour) // a fresh budget
	resp, err := c.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := srv.n.Load() - before; n != 1 {
		t.Fatalf("a POST was sent %d times", n)
	}
	// ...unless told, and its body is sent again whole.
	var bodies []string
	var mu sync.Mutex
	srv.answer = func(n int64, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	c2 := &http.Client{Transport: shedclient.New(shedclient.Config{Clock: clock, K: -1, RetryNonIdempotent: true, RetryBudget: 1}).Transport(nil)}
	resp, err = c2.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(bodies) < 2 || bodies[0] != "charge" || bodies[len(bodies)-1] != "charge" {
		t.Fatalf("bodies %q", bodies)
	}
}

func TestRetryNeverSoonerThanAsked(t *testing.T) {
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	clock := instantclock.New()
	c := &http.Client{Transport: shedclient.New(shedclient.Config{Clock: clock, K: -1, RetryBudget: 1}).Transport(nil)}
	if code, err := get(t, c, context.Background(), srv.URL); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if w := clock.Waits(); len(w) != 1 || w[0] < 3*time.Second {
		t.Fatalf("waited %v before the retry, want >= 3s", w)
	}
}

func TestPropagatesPriorityAndBudget(t *testing.T) {
	var got http.Header
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() })
	c := &http.Client{Transport: shedclient.New(shedclient.Config{Token: "s3cret"}).Transport(nil)}
	ctx, cancel := context.WithTimeout(shed.WithPriority(context.Background(), shed.Critical), 5*time.Second)
	defer cancel()
	if _, err := get(t, c, ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	if got.Get(propagation.PriorityHeader) != "critical" || got.Get(propagation.TokenHeader) != "s3cret" {
		t.Fatalf("headers %v", got)
	}
	if d, ok := propagation.ParseBudget(got.Get(propagation.BudgetHeader)); !ok || d <= 4*time.Second || d > 5*time.Second {
		t.Fatalf("budget %q", got.Get(propagation.BudgetHeader))
	}
	// Nothing to propagate: the request goes as it was.
	if _, err := get(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if got.Get(propagation.PriorityHeader) != "" || got.Get(propagation.BudgetHeader) != "" {
		t.Fatalf("headers %v", got)
	}
}

// hostile answers every request with the fuzzed headers.
type hostile struct{ retryAfter, limit, policy string }

func (h hostile) RoundTrip(r *http.Request) (*http.Response, error) {
	hd := http.Header{}
	hd["Retry-After"] = []string{h.retryAfter}
	// A newline splits a field into field lines, as a server sending the
	// field several times does.
	hd["Ratelimit"] = strings.Split(h.limit, "\n")
	hd["Ratelimit-Policy"] = strings.Split(h.policy, "\n")
	code := 429
	if len(h.limit)%2 == 1 {
		code = 503
	}
	return &http.Response{StatusCode: code, Header: hd, Body: http.NoBody, Request: r}, nil
}

// FuzzHostileServer: whatever a server answers, the client never waits
// past MaxWait or the request's deadline, and never panics.
func FuzzHostileServer(f *testing.F) {
	for _, s := range [][3]string{
		{"-1", `"a";r=0;t=-5`, `"a";q=1;w=1`},
		{"99999999999999999999", `"a";r=0;t=999999999999999`, ``},
		{"Fri, 31 Dec 9999 23:59:59 GMT", `"a";r=-1;t=1`, `"a"`},
		{"Thu, 01 Jan 1970 00:00:00 GMT", `not a list (`, `"a";pk=:AAAA:`},
		{"3", `"a";r=0;t=4, "b";r=0;t=9`, `"a", "b"`},
		{"", "", ""},
		{"", "\"a\";r=0;t=3\n\"b\";r=4;t=9", "\"a\";q=5\n\"b\";q=9"},
		{"1", "\"a\";r=0;t=3\nnot a list (", "\n"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, retryAfter, limit, policy string) {
		const maxWait = 5 * time.Second
		clock := instantclock.New()
		c := shedclient.New(shedclient.Config{Clock: clock, MaxWait: maxWait, RetryBudget: 1, MaxRetries: 3})
		rt := c.Transport(hostile{retryAfter, limit, policy})
		deadline := clock.Now().Add(2 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		for range 3 {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc.test/", nil)
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}
		var total time.Duration
		for _, w := range clock.Waits() {
			if w < 0 || w > maxWait {
				t.Fatalf("waited %v", w)
			}
			total += w
		}
		if total > 2*time.Second {
			t.Fatalf("waited %v in all, past the 2s deadline", total)
		}
	})
}

func TestRetryAfterDateAndScopes(t *testing.T) {
	clock := instantclock.New()
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("user") == "a" && n == 0 {
			w.Header().Set("Retry-After", clock.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	c := &http.Client{Transport: shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1,
		HTTPScope: func(r *http.Request) string { return r.URL.Query().Get("user") }}).Transport(nil)}
	if code, err := get(t, c, context.Background(), srv.URL+"?user=a"); err != nil || code != 429 {
		t.Fatalf("first: %d %v", code, err)
	}
	_, err := get(t, c, context.Background(), srv.URL+"?user=a")
	var qe *shedclient.QuotaError
	if !errors.As(err, &qe) || qe.RetryAfter < 89*time.Second || qe.RetryAfter > 90*time.Second {
		t.Fatalf("user a again: %v", err)
	}
	// User b's requests are a scope of their own.
	if code, err := get(t, c, context.Background(), srv.URL+"?user=b"); err != nil || code != 200 {
		t.Fatalf("user b: %d %v", code, err)
	}
	if n := srv.n.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}

func TestTimeoutsCountAgainstTheDestination(t *testing.T) {
	// The server never answers within the deadline: each request times
	// out, which throttling counts as it counts a rejection.
	release := make(chan struct{})
	srv := newServer(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	c := &http.Client{Transport: shedclient.New(shedclient.Config{RetryBudget: -1}).Transport(nil)}
	throttled := 0
	for range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		if _, err := get(t, c, ctx, srv.URL); errors.Is(err, shedclient.ErrThrottled) {
			throttled++
		}
		cancel()
	}
	if throttled < 20 {
		t.Fatalf("%d of 40 requests to a destination that never answers in time were held back", throttled)
	}
}
