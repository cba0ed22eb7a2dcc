package config

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func mustParse(t testing.TB, src string, opts Options) *File {
	t.Helper()
	f, err := Parse("test.yaml", []byte(src), opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustBuild(t testing.TB, src string, opts Options) *Built {
	t.Helper()
	b, err := Build(mustParse(t, src, opts), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func ok(context.Context) error { return nil }

func TestBuiltChainEnforcesTheRules(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	b := mustBuild(t, `
layers:
  - ratelimit:
      descriptors:
        - key: key
          name: per-key
          rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed-window}
        - key: route
          value: "GET /x"
          rate_limit: {unit: minute, requests_per_unit: 1}
          shadow_mode: true
`, Options{Clock: clock})
	if n := len(b.Chain.Layers()); n != 2 {
		t.Fatalf("%d layers, want 2 (shadow, enforcing)", n)
	}
	ctx := context.Background()
	req := shed.Request{Key: "a", Route: "GET /x"}
	for i := 1; i <= 3; i++ {
		var g shed.Grant
		if err := b.Chain.Acquire(ctx, req, &g); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if dry := g.Leases()[0].DryRun; dry != (i > 1) {
			t.Errorf("request %d: shadow lease DryRun %v, want %v", i, dry, i > 1)
		}
		g.Release(shed.Completed)
	}
	err := b.Chain.Do(ctx, req, ok)
	rej := shedtest.Rejection(t, err)
	if rej.Status != http.StatusTooManyRequests || rej.Layer != "ratelimit" {
		t.Errorf("4th request: %+v, want a 429 from ratelimit", rej)
	}
	if q := rej.Policies; len(q) == 0 || q[0].Policy != "per-key" {
		t.Errorf("rejection policies %+v, want the per-key policy", q)
	}
	clock.Advance(time.Minute)
	if err := b.Chain.Do(ctx, req, ok); err != nil {
		t.Errorf("after a minute: %v", err)
	}
}

func TestDescriptorsFromOptions(t *testing.T) {
	type tenantKey struct{}
	opts := Options{Descriptors: map[string]func(context.Context, shed.Request) string{
		"tenant": func(ctx context.Context, _ shed.Request) string {
			s, _ := ctx.Value(tenantKey{}).(string)
			return s
		},
	}}
	src := `
layers:
  - ratelimit:
      descriptors:
        - key: tenant
          value: acme
          rate_limit: {unit: hour, requests_per_unit: 1}
`
	if _, err := Parse("t.yaml", []byte(src), Options{}); err == nil {
		t.Fatal("a descriptor key the options do not resolve was accepted")
	}
	b := mustBuild(t, src, opts)
	acme := context.WithValue(context.Background(), tenantKey{}, "acme")
	other := context.WithValue(context.Background(), tenantKey{}, "other")
	if err := b.Chain.Do(acme, shed.Request{Key: "k"}, ok); err != nil {
		t.Fatal(err)
	}
	if err := b.Chain.Do(acme, shed.Request{Key: "k"}, ok); err == nil {
		t.Error("acme's second request in the hour was admitted")
	}
	if err := b.Chain.Do(other, shed.Request{Key: "k"}, ok); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}

func TestBuiltMiddlewareReadsTheHTTPSection(t *testing.T) {
	b := mustBuild(t, `
http:
  key: {from: header, header: X-API-Key}
  default_priority: sheddable
  priorities:
    "POST /v1/charges": critical
layers:
  - ratelimit:
      descriptors:
        - key: priority
          value: sheddable
          rate_limit: {unit: hour, requests_per_unit: 1}
        - key: key
          rate_limit: {unit: hour, requests_per_unit: 3}
`, Options{})
	mw := b.Middleware()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/list", func(http.ResponseWriter, *http.Request) {})
	h := mw(mux)
	send := func(method, path, key string) int {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		// ServeMux sets r.Pattern only when it routes; route first, as a
		// router mounted before the middleware would.
		_, r.Pattern = mux.Handler(r)
		h.ServeHTTP(w, r)
		return w.Code
	}
	if c := send("GET", "/v1/list", "a"); c != 200 {
		t.Fatalf("first sheddable request: %d", c)
	}
	if c := send("GET", "/v1/list", "b"); c != 429 {
		t.Errorf("second sheddable request (any key): %d, want 429", c)
	}
	for i := 0; i < 3; i++ {
		if c := send("POST", "/v1/charges", "c"); c != 200 {
			t.Errorf("critical request %d: %d", i, c)
		}
	}
	if c := send("POST", "/v1/charges", "c"); c != 429 {
		t.Errorf("key c's 4th request: %d, want 429", c)
	}
}

func TestBuildRefusesWhatValidateRefuses(t *testing.T) {
	_, err := Build(&File{}, Options{})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors, got %v", err)
	}
}

func benchRequest() shed.Request { return shed.Request{Key: "k", Route: "GET /x"} }

// TestElasticReadsTheWorkerLayer: a file with a worker layer needs no
// Options.Headroom; its elastic layers read the worker's.
func TestElasticReadsTheWorkerLayer(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	b := mustBuild(t, `
layers:
  - ratelimit:
      mode: elastic
      overage: 1
      descriptors:
        - key: key
          rate_limit: {unit: hour, requests_per_unit: 2, algorithm: fixed-window}
  - worker:
      cpu: {disable: true}
`, Options{Clock: clock})
	names := []string{}
	for _, l := range b.Chain.Layers() {
		names = append(names, l.Name())
	}
	if len(names) != 2 || names[1] != "worker" {
		t.Fatalf("layers %v", names)
	}
	// An idle worker has full headroom: the elastic limit lends its overage
	// (one more request in two), then says no.
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if err := b.Chain.Do(ctx, shed.Request{Key: "k"}, ok); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	if err := b.Chain.Do(ctx, shed.Request{Key: "k"}, ok); err == nil {
		t.Error("the elastic limit went past its overage")
	}
}
