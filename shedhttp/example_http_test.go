package shedhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// perKeyQuota is a toy layer for the examples: each key may make limit
// requests, ever. Real limits come from the ratelimit and concurrency
// packages.
type perKeyQuota struct {
	mu    sync.Mutex
	limit int64
	used  map[string]int64
}

func (l *perKeyQuota) Name() string { return "quota" }

func (l *perKeyQuota) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := shed.Quota{Policy: "per-key", Limit: l.limit, Window: time.Minute, Reset: 30 * time.Second}
	if l.used[req.Key] >= l.limit {
		return shed.Lease{}, shed.Throttled("rate limit exceeded", 30*time.Second, q)
	}
	l.used[req.Key]++
	q.Remaining = l.limit - l.used[req.Key]
	lease := shed.NewLease(l)
	lease.Quota = q
	return lease, nil
}

func (l *perKeyQuota) Release(*shed.Lease, shed.Outcome) {}

// reportPriority is a toy layer that prints how each request was resolved.
type reportPriority struct{}

func (reportPriority) Name() string { return "report" }

func (r reportPriority) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	fmt.Printf("  layer sees key=%s route=%q priority=%v\n", req.Key, req.Route, req.Priority)
	return shed.NewLease(r), nil
}

func (reportPriority) Release(*shed.Lease, shed.Outcome) {}

func ExampleNew() {
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{
		reportPriority{},
		&perKeyQuota{limit: 1, used: map[string]int64{}},
	}})
	if err != nil {
		panic(err)
	}
	shedder, err := shedhttp.New(chain, shedhttp.Config{
		Key: shedhttp.KeyHash(shedhttp.KeyHeader("X-API-Key")), // fall back to the client IP without one
		Priorities: shedhttp.RoutePriorities{
			"POST /v1/charges": shed.Critical,
			"/v1/reports/*":    shed.Sheddable,
		},
	})
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(shedder) // runs before chi routes: the shedder finds the route itself
	r.Post("/v1/charges", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "charged\n") })
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "report\n") })

	for _, path := range []string{"POST /v1/charges", "GET /v1/reports/r_1"} {
		var method, target string
		fmt.Sscan(path, &method, &target)
		req := httptest.NewRequest(method, target, nil)
		req.RemoteAddr = "203.0.113.7:4242"
		rec := httptest.NewRecorder()
		fmt.Println(path)
		r.ServeHTTP(rec, req)
		fmt.Printf("  %d RateLimit-Policy: %s\n", rec.Code, rec.Header().Get("RateLimit-Policy"))
		fmt.Printf("  RateLimit: %s\n", rec.Header().Get("RateLimit"))
		if rec.Code != http.StatusOK {
			fmt.Printf("  Retry-After: %s\n", rec.Header().Get("Retry-After"))
			fmt.Printf("  %s: %s", rec.Header().Get("Content-Type"), rec.Body)
		}
	}
	// Output:
	// POST /v1/charges
	//   layer sees key=203.0.113.7 route="POST /v1/charges" priority=critical
	//   200 RateLimit-Policy: "per-key";q=1;w=60
	//   RateLimit: "per-key";r=0;t=30
	// GET /v1/reports/r_1
	//   layer sees key=203.0.113.7 route="GET /v1/reports/{id}" priority=sheddable
	//   429 RateLimit-Policy: "per-key";q=1;w=60
	//   RateLimit: "per-key";r=0;t=30
	//   Retry-After: 30
	//   application/problem+json: {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["per-key"]}
}

func ExamplePrioritize() {
	chain, _ := shed.NewChain(shed.Config{Layers: []shed.Layer{reportPriority{}}})
	shedder, _ := shedhttp.New(chain, shedhttp.Config{})

	r := chi.NewRouter()
	// Mounted per route, the shedder runs after chi routed, after the marker.
	r.With(shedhttp.Prioritize(shed.Critical), shedder).Post("/v1/charges", func(http.ResponseWriter, *http.Request) {})
	r.With(shedder).Get("/v1/balance", func(http.ResponseWriter, *http.Request) {})

	for _, req := range []*http.Request{
		httptest.NewRequest("POST", "/v1/charges", nil),
		httptest.NewRequest("GET", "/v1/balance", nil),
	} {
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	// Output:
	//   layer sees key=192.0.2.1 route="POST /v1/charges" priority=critical
	//   layer sees key=192.0.2.1 route="GET /v1/balance" priority=default
}

func ExampleNewClientIP() {
	ip, err := shedhttp.NewClientIP(shedhttp.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.2:51000" // the load balancer
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.23, 10.0.0.9")
	a, _ := ip.Addr(req)
	fmt.Println(a) // the first untrusted hop from the right; 6.6.6.6 was the client's own claim

	key := shedhttp.KeyCombine(shedhttp.KeyHeader("X-Tenant"), shedhttp.KeyClientIP(ip))
	req.Header.Set("X-Tenant", "acme")
	k, _ := key(req)
	fmt.Println(k)
	// Output:
	// 198.51.100.23
	// h:x-tenant:acme|198.51.100.23
}

func ExampleWriteRejection() {
	rej := shed.Shed("shedding sheddable work", 1500*time.Millisecond)
	rec := httptest.NewRecorder()
	shedhttp.WriteRejection(rec, rej)
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	fmt.Print(rec.Body)
	// Output:
	// 503 2
	// {"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,"detail":"shedding sheddable work"}
}
