package shedhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// httpNopLayer admits everything and gives back nothing, so the benchmarks
// measure the middleware and the chain, not a limiter. quota, when set, is
// put on every lease, to price the RateLimit fields.
type httpNopLayer struct {
	name  string
	quota shed.Quota
}

func (l *httpNopLayer) Name() string { return l.name }

func (l *httpNopLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	lease := shed.NewLease(l)
	lease.Cost = 1
	lease.Quota = l.quota
	return lease, nil
}

func (l *httpNopLayer) Release(*shed.Lease, shed.Outcome) {}

func benchLayers(quota shed.Quota) []shed.Layer {
	return []shed.Layer{
		&httpNopLayer{name: "ratelimit", quota: quota}, &httpNopLayer{name: "concurrency"},
		&httpNopLayer{name: "fleet"}, &httpNopLayer{name: "worker"},
	}
}

func okHandler(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "ok")
}

// discard is a ResponseWriter that keeps nothing and reuses its header map,
// so that a benchmark using it shows the middleware's own allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	clear(d.h)
	return d.h
}
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }

// WriteString is what net/http's own writer offers: io.WriteString then
// needs no copy.
func (d *discard) WriteString(s string) (int, error) { return len(s), nil }

// BenchmarkHTTPMiddleware compares a bare handler with the same handler
// behind the middleware and a chain of four no-op layers, in the same run,
// serially and in parallel. The difference between "bare" and "shed" (and
// between "chi-bare" and "chi-use") is the middleware's overhead.
//
//   - bare, shed: httptest.ResponseRecorder, a fresh one per request (as
//     the recorder is meant to be used); the recorder's own allocations are
//     in both.
//   - bare-discard, shed-discard: a reusable writer that keeps nothing, to
//     show the middleware's own cost and allocations (none) without the
//     recorder's.
//   - shed-quota, shed-quota-discard: a layer that reports a quota, so the
//     RateLimit fields are written on every admitted response.
//   - chi-bare, chi-use: a chi router with four routes; the shedder is
//     mounted with r.Use with route annotations, so it looks the route up
//     before chi routes. The -mounted variants ask for a route of a
//     mounted sub-router, whose full pattern chi's Find builds (two
//     allocations in chi: the sub-router's path and the joined pattern).
func BenchmarkHTTPMiddleware(b *testing.B) {
	bare := http.HandlerFunc(okHandler)
	build := func(b *testing.B, quota shed.Quota, cfg shedhttp.Config) func(http.Handler) http.Handler {
		c, err := shed.NewChain(shed.Config{Layers: benchLayers(quota)})
		if err != nil {
			b.Fatal(err)
		}
		mw, err := shedhttp.New(c, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return mw
	}
	shedded := build(b, shed.Quota{}, shedhttp.Config{})(bare)
	quota := shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 42, Reset: 17 * time.Second}
	withQuota := build(b, quota, shedhttp.Config{})(bare)

	router := func(mw func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		if mw != nil {
			r.Use(mw)
		}
		r.Post("/v1/charges", okHandler)
		r.Get("/v1/charges/{id}", okHandler)
		r.Get("/v1/reports/{id}", okHandler)
		r.Route("/v2", func(r chi.Router) { r.Get("/charges/{id}", okHandler) })
		return r
	}
	chiBare := router(nil)
	chiUse := router(build(b, shed.Quota{}, shedhttp.Config{Priorities: shedhttp.RoutePriorities{
		"POST /v1/charges": shed.Critical, "/v1/reports/*": shed.Sheddable,
	}}))

	newReq := func(path string) *http.Request {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.7:5555"
		return r
	}
	recorder := func(h http.Handler, path string) func(*testing.B) {
		return func(b *testing.B) {
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				r := newReq(path)
				for b.Loop() {
					h.ServeHTTP(httptest.NewRecorder(), r)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r := newReq(path)
					for pb.Next() {
						h.ServeHTTP(httptest.NewRecorder(), r)
					}
				})
			})
		}
	}
	b.Run("bare", recorder(bare, "/v1/charges/ch_1"))
	b.Run("shed", recorder(shedded, "/v1/charges/ch_1"))
	b.Run("shed-quota", recorder(withQuota, "/v1/charges/ch_1"))
	b.Run("chi-bare", recorder(chiBare, "/v1/charges/ch_1"))
	b.Run("chi-use", recorder(chiUse, "/v1/charges/ch_1"))
	b.Run("chi-bare-mounted", recorder(chiBare, "/v2/charges/ch_1"))
	b.Run("chi-use-mounted", recorder(chiUse, "/v2/charges/ch_1"))
	discarding := func(h http.Handler) func(*testing.B) {
		return func(b *testing.B) {
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				r, w := newReq("/v1/charges/ch_1"), &discard{h: http.Header{}}
				for b.Loop() {
					h.ServeHTTP(w, r)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r, w := newReq("/v1/charges/ch_1"), &discard{h: http.Header{}}
					for pb.Next() {
						h.ServeHTTP(w, r)
					}
				})
			})
		}
	}
	b.Run("bare-discard", discarding(bare))
	b.Run("shed-discard", discarding(shedded))
	b.Run("shed-quota-discard", discarding(withQuota))
}

// BenchmarkHTTPRejection prices answering a rejection: status, Retry-After,
// the RateLimit fields and the problem document of a client over its quota
// (quota), and the status, Retry-After and problem document of a layer
// shedding load (overload), the answer a flood gets thousands of times a
// second.
func BenchmarkHTTPRejection(b *testing.B) {
	for _, bc := range []struct {
		name string
		rej  *shed.Rejection
	}{
		{"quota", quotaRejection()},
		{"overload", &shed.Rejection{Layer: "worker", Status: http.StatusServiceUnavailable, Reason: "queue full", RetryAfter: time.Second}},
	} {
		h := rejectingHandler(b, bc.rej)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/", nil)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// quotaRejection is a client over its per-key quota: a 429 whose answer
// carries Retry-After and the RateLimit fields.
func quotaRejection() *shed.Rejection {
	return shed.Throttled("rate limit exceeded", 3*time.Second,
		shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 0, Reset: 3 * time.Second})
}

// rejectingHandler is the middleware, with its default Config, over a
// chain whose one layer refuses every request with rej.
func rejectingHandler(tb testing.TB, rej *shed.Rejection) http.Handler {
	tb.Helper()
	c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rejectLayer{rej}}})
	if err != nil {
		tb.Fatal(err)
	}
	mw, err := shedhttp.New(c, shedhttp.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return mw(http.HandlerFunc(okHandler))
}

type rejectLayer struct{ rej *shed.Rejection }

func (rejectLayer) Name() string { return "reject" }

func (l rejectLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	return shed.Lease{}, l.rej
}

// TestMiddlewareAdmitAllocations proves the admitted path allocates
// nothing of its own: the key is the peer IP taken from RemoteAddr, the
// per-request state is recycled, and no layer reports a quota.
func TestMiddlewareAdmitAllocations(t *testing.T) {
	c, err := shed.NewChain(shed.Config{Layers: benchLayers(shed.Quota{})})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := shedhttp.New(c, shedhttp.Config{Priorities: shedhttp.RoutePriorities{"/x/*": shed.Sheddable}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(okHandler))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) }); allocs > 0 {
		t.Errorf("an admitted request allocates %v times in the middleware, want 0", allocs)
	}
}

// TestMiddlewareRejectAllocations bounds what answering a rejection costs
// the middleware: its header values in two allocations (the problem
// document's fields and Retry-After; the RateLimit fields), and checks them.
func TestMiddlewareRejectAllocations(t *testing.T) {
	h := rejectingHandler(t, quotaRejection())
	r := httptest.NewRequest("GET", "/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	want := map[string]string{
		"Content-Type": shedhttp.ProblemContentType, "Content-Length": strconv.Itoa(rec.Body.Len()),
		"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Retry-After": "3",
		"Ratelimit-Policy": `"per-key";q=100;w=60`, "Ratelimit": `"per-key";r=0;t=3`,
	}
	for k, v := range want {
		if got := rec.Header()[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	w := &discard{h: http.Header{}}
	if allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) }); allocs > 2 {
		t.Errorf("a rejection allocates %v times in the middleware, want at most 2", allocs)
	}
}
