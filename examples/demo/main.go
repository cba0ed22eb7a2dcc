// Command demo runs a small API behind loadshed, on in-memory defaults (no
// Redis), so that you can watch it shed: a chi router whose routes are
// annotated with priorities, a rate-limit layer that answers 429 with
// Retry-After, the RateLimit fields and a problem document once a key has
// spent its quota, and a concurrent-request layer that caps requests in
// flight overall and per key.
//
//	go run ./examples/demo              # listens on 127.0.0.1:8080
//	go run ./examples/demo -addr :9000  # elsewhere
//	go run ./examples/demo -selftest    # starts on a free port, asks itself, prints what it got, exits
//
// It prints a curl line to try. Every decision is logged on stdout with the
// request's priority, and counted in Prometheus metrics served on /metrics;
// the status page at /debug/loadshed shows the layers live. Neither is ever
// rate limited or shed itself. (A real service serves both on an admin
// port or behind authentication.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/shedprom"
	"github.com/loadshed/loadshed/statuspage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	selftest := fs.Bool("selftest", false, "listen on 127.0.0.1:0, send a few requests to itself, print what came back, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *selftest {
		*addr = "127.0.0.1:0"
	}

	app, err := newApp(stdout, !*selftest)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer app.close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	srv := &http.Server{Handler: app.handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	if *selftest {
		code := selfTest(base, stdout)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		return code
	}

	fmt.Fprintf(stdout, "loadshed demo listening on %s (in memory, no Redis)\n", base)
	fmt.Fprintf(stdout, "routes: POST /v1/charges (critical), GET /v1/balance (default), GET /v1/reports/{id} (sheddable)\n")
	fmt.Fprintf(stdout, "limits: %d requests per minute per key; sheddable routes %d per minute per key\n", perKeyLimit, sheddableLimit)
	fmt.Fprintf(stdout, "        at most %d requests in flight, %d per key\n", inFlightLimit, inFlightPerKeyLimit)
	fmt.Fprintf(stdout, "try it (the third report request is rejected with 429):\n")
	fmt.Fprintf(stdout, "  for i in 1 2 3; do curl -si -H 'X-API-Key: demo' %s/v1/reports/r_1; echo; done\n", base)
	fmt.Fprintf(stdout, "watch it live: %s%s\n", base, statuspage.Path)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}
	return 0
}

const (
	perKeyLimit    = 10
	sheddableLimit = 2
	// At most this many requests in flight in the process (503 above it)
	// and per key (429 above it).
	inFlightLimit       = 64
	inFlightPerKeyLimit = 8
)

type app struct {
	handler http.Handler
	close   func()
}

// newApp builds the router and the chain: the request-rate layer, then the
// concurrent-request layer. logDecisions prints
// every decision the chain makes.
func newApp(stdout io.Writer, logDecisions bool) (*app, error) {
	perKey, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(perKeyLimit), ratelimit.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	sheddable, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(sheddableLimit), ratelimit.MemoryConfig{})
	if err != nil {
		perKey.Close()
		return nil, err
	}
	closeAll := func() { perKey.Close(); sheddable.Close() }
	limits, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey},
		{Name: "sheddable-per-key", Descriptors: []ratelimit.Descriptor{
			{Key: "priority", Value: shed.Sheddable.String()}, ratelimit.ByClient,
		}, Store: sheddable},
	}})
	if err != nil {
		closeAll()
		return nil, err
	}

	inFlight, err := concurrency.New(concurrency.Config{
		Limit: inFlightLimit, PerKey: inFlightPerKeyLimit, KeyBy: concurrency.KeyByClient,
	})
	if err != nil {
		limits.Close()
		closeAll()
		return nil, err
	}

	reg := prometheus.NewRegistry()
	metrics, err := shedprom.New(shedprom.Config{Registerer: reg, Layers: []shed.Layer{limits, inFlight}})
	if err != nil {
		closeAll()
		return nil, err
	}
	// The status page's recorder, beside the metrics.
	status, err := shedstatus.New(shedstatus.Config{Layers: []shed.Layer{limits, inFlight}})
	if err != nil {
		closeAll()
		return nil, err
	}
	closeAll = func() { status.Close(); perKey.Close(); sheddable.Close() }
	obs := shed.Observers{metrics, status}
	if logDecisions {
		obs = append(obs, shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.Released {
				return
			}
			line := fmt.Sprintf("decision: layer=%s priority=%s %s", e.Layer, e.Priority, e.Kind)
			if e.Status != 0 {
				line += fmt.Sprintf(" status=%d", e.Status)
			}
			fmt.Fprintln(stdout, line)
		}))
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{limits, inFlight}, Observer: obs})
	if err != nil {
		closeAll()
		return nil, err
	}
	shedder, err := shedhttp.New(chain, shedhttp.Config{
		// Clients with an API key are limited per key (hashed: it is a
		// secret); the others per client IP.
		Key: shedhttp.KeyHash(shedhttp.KeyHeader("X-API-Key")),
		Priorities: shedhttp.RoutePriorities{
			"POST /v1/charges": shed.Critical,
			"/v1/reports/*":    shed.Sheddable,
		},
		LegacyHeaders: true,
		// The metrics and the status page are never counted or shed.
		Skip: func(r *http.Request) bool { return r.URL.Path == "/metrics" || r.URL.Path == statuspage.Path },
	})
	if err != nil {
		closeAll()
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(shedder)
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			next.ServeHTTP(w, r)
		})
	})
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	r.Handle(statuspage.Path, statuspage.New(status, statuspage.Options{Title: "loadshed demo"}))
	r.Post("/v1/charges", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","status":"succeeded"}`+"\n")
	})
	r.Get("/v1/balance", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"available":1000}`+"\n")
	})
	r.Get("/v1/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"report":"`+chi.URLParam(r, "id")+`","rows":[]}`+"\n")
	})
	return &app{handler: r, close: func() { limits.Close(); closeAll() }}, nil
}

// selfTest sends a bounded number of requests to the demo and prints the
// statuses and shedding headers it got. It succeeds when the sheddable
// route was rejected with 429 and its headers, and the critical route was
// still served.
func selfTest(base string, out io.Writer) int {
	client := &http.Client{Timeout: 5 * time.Second}
	steps := []struct{ method, path string }{
		{"GET", "/v1/reports/r_1"},
		{"GET", "/v1/reports/r_1"},
		{"GET", "/v1/reports/r_1"}, // over the sheddable quota: 429
		{"POST", "/v1/charges"},    // critical, still within the per-key quota
		{"GET", "/v1/balance"},
	}
	var got429, chargeOK bool
	for _, s := range steps {
		req, err := http.NewRequest(s.method, base+s.path, nil)
		if err != nil {
			fmt.Fprintln(out, "selftest:", err)
			return 1
		}
		req.Header.Set("X-API-Key", "demo")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintln(out, "selftest:", err)
			return 1
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		fmt.Fprintf(out, "%s %s -> %s\n", s.method, s.path, resp.Status)
		var names []string
		for name := range resp.Header {
			if strings.HasPrefix(name, "Ratelimit") || strings.HasPrefix(name, "X-Ratelimit") || name == "Retry-After" || name == "Content-Type" {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			fmt.Fprintf(out, "  %s: %s\n", name, strings.Join(resp.Header[name], ", "))
		}
		fmt.Fprintf(out, "  %s\n", strings.TrimSpace(string(body)))
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" && resp.Header.Get("RateLimit") != "":
			got429 = true
		case s.path == "/v1/charges" && resp.StatusCode == http.StatusCreated:
			chargeOK = true
		}
	}
	// The metrics the decisions above were counted in.
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		fmt.Fprintln(out, "selftest:", err)
		return 1
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	fmt.Fprintf(out, "GET /metrics -> %s\n", resp.Status)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "loadshed_requests_total{") && strings.Contains(line, `result="rejected"`) {
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
	// The status page, as JSON: the rejection above is in its ring.
	resp, err = client.Get(base + statuspage.Path + "?format=json")
	if err != nil {
		fmt.Fprintln(out, "selftest:", err)
		return 1
	}
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	fmt.Fprintf(out, "GET %s?format=json -> %s\n", statuspage.Path, resp.Status)
	pageOK := resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"policy":"sheddable-per-key"`)
	if !got429 || !chargeOK || !pageOK {
		fmt.Fprintf(out, "selftest: FAILED (429 with headers seen: %v, critical charge served: %v, status page shows the rejection: %v)\n", got429, chargeOK, pageOK)
		return 1
	}
	fmt.Fprintln(out, "selftest: ok")
	return 0
}
