package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
)

func serve(t *testing.T, cfg Config) (*Service, *httptest.Server) {
	t.Helper()
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { srv.Close(); svc.Close() })
	return svc, srv
}

func do(t *testing.T, srv *httptest.Server, method, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(KeyHeader, "k1")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRoutesCountByPriority(t *testing.T) {
	for _, p := range []Protection{Unprotected, BlindLimit, Loadshed, LoadshedCPUBound} {
		t.Run(string(p), func(t *testing.T) {
			svc, srv := serve(t, Config{Protection: p, GlobalRate: 1000})
			for _, c := range []struct {
				method, path string
				header       []string
				status       int
				prio         shed.Priority
			}{
				{http.MethodPost, "/v1/charges?work=0s", nil, http.StatusCreated, shed.Critical},
				{http.MethodGet, "/v1/charges?work=1ms", nil, http.StatusOK, shed.Default},
				{http.MethodGet, "/v1/reports", nil, http.StatusOK, shed.Sheddable},
				{http.MethodGet, "/v1/reports", []string{TestModeHeader, "true"}, http.StatusOK, shed.TestMode},
			} {
				before := svc.Stats().Count(c.prio, OK)
				if status, body := do(t, srv, c.method, c.path, c.header...); status != c.status {
					t.Errorf("%s %s: %d %s, want %d", c.method, c.path, status, body, c.status)
				}
				if got := svc.Stats().Count(c.prio, OK) - before; got != 1 {
					t.Errorf("%s %s: counted %d ok at %s, want 1", c.method, c.path, got, c.prio)
				}
			}
		})
	}
}

func TestWorkIsBounded(t *testing.T) {
	_, srv := serve(t, Config{Protection: Unprotected})
	for _, w := range []string{"x", "-1ms", "2s"} {
		if status, _ := do(t, srv, http.MethodGet, "/v1/charges?work="+w); status != http.StatusBadRequest {
			t.Errorf("work=%s: %d, want 400", w, status)
		}
	}
}

func TestHealthMetricsAndStatusAreNeverCounted(t *testing.T) {
	svc, srv := serve(t, Config{Protection: Loadshed})
	for range 3 {
		if status, _ := do(t, srv, http.MethodGet, "/healthz"); status != http.StatusOK {
			t.Fatalf("/healthz: %d", status)
		}
	}
	do(t, srv, http.MethodGet, "/v1/reports")
	status, body := do(t, srv, http.MethodGet, "/debug/loadshed?format=json")
	if status != http.StatusOK || !strings.Contains(body, `"name":"worker"`) || !strings.Contains(body, `"name":"ratelimit"`) {
		t.Errorf("the status page: %d\n%s", status, body)
	}
	if status, body := do(t, srv, http.MethodGet, "/debug/loadshed"); status != http.StatusOK || !strings.Contains(body, `data-layer="worker"`) {
		t.Errorf("the status page: %d\n%.300s", status, body)
	}
	status, body = do(t, srv, http.MethodGet, "/metrics")
	if status != http.StatusOK || !strings.Contains(body, `loadshed_example_requests_total{priority="critical",answer="ok"} 0`) ||
		!strings.Contains(body, `loadshed_layer_gauge{layer="worker",name="shed_level"`) {
		t.Errorf("/metrics: %d\n%s", status, body)
	}
	for _, p := range shed.Priorities() {
		for a := Answer(0); a < numAnswers; a++ {
			want := int64(0)
			if p == shed.Sheddable && a == OK {
				want = 1 // the one report
			}
			if n := svc.Stats().Count(p, a); n != want {
				t.Errorf("%s %s: %d, want %d", p, a, n, want)
			}
		}
	}
}

func TestBlindLimitRejectsEveryPriorityAlike(t *testing.T) {
	svc, srv := serve(t, Config{Protection: BlindLimit, GlobalRate: 1})
	do(t, srv, http.MethodGet, "/v1/reports?work=0s") // spends the one token
	if status, _ := do(t, srv, http.MethodPost, "/v1/charges?work=0s"); status != http.StatusTooManyRequests {
		t.Errorf("critical after the global limit is spent: %d, want 429", status)
	}
	if n := svc.Stats().Count(shed.Critical, Throttled); n != 1 {
		t.Errorf("critical 429s counted: %d, want 1", n)
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := New(Config{Protection: BlindLimit}); err == nil || !strings.Contains(err.Error(), "GlobalRate") {
		t.Errorf("blind limit without a rate: %v", err)
	}
	if _, err := New(Config{Protection: "magic"}); err == nil {
		t.Error("unknown protection: no error")
	}
	if _, err := ParseProtection("magic"); err == nil {
		t.Error("ParseProtection(magic): no error")
	}
}

func TestFleetLayerWithRedis(t *testing.T) {
	addr := redistest.Addr(t)
	svc, srv := serve(t, Config{Protection: Loadshed, Redis: addr, Instance: "api-test", FleetPrefix: redistest.Prefix(t)})
	if status, body := do(t, srv, http.MethodPost, "/v1/charges?work=0s"); status != http.StatusCreated {
		t.Fatalf("POST /v1/charges: %d %s", status, body)
	}
	_, body := do(t, srv, http.MethodGet, "/metrics")
	if !strings.Contains(body, `loadshed_layer_gauge{layer="fleet",name="usage",priority="critical"`) {
		t.Errorf("/metrics has no fleet usage:\n%s", body)
	}
	if n := svc.Stats().Count(shed.Critical, OK); n != 1 {
		t.Errorf("critical ok: %d, want 1", n)
	}
}

func TestLayersFromAConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loadshed.yaml")
	write := func(perMinute int) {
		t.Helper()
		yaml := fmt.Sprintf(`layers:
  - ratelimit:
      descriptors:
        - key: key
          name: per-key-%d
          rate_limit: {unit: minute, requests_per_unit: %d}
`, perMinute, perMinute)
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(2)
	svc, srv := serve(t, Config{Protection: Loadshed, ConfigFile: path})
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if status, _ := do(t, srv, http.MethodGet, "/v1/charges?work=0s"); status != want {
			t.Fatalf("request %d under 2 a minute: %d, want %d", i+1, status, want)
		}
	}
	write(5)
	if err := svc.live.Reload(); err != nil {
		t.Fatal(err)
	}
	if status, _ := do(t, srv, http.MethodGet, "/v1/charges?work=0s"); status != http.StatusOK {
		t.Fatalf("after the reload to 5 a minute: %d, want 200", status)
	}
	if _, err := New(Config{Protection: Loadshed, ConfigFile: filepath.Join(t.TempDir(), "missing.yaml")}); err == nil {
		t.Error("a missing configuration file: no error")
	}
}

func TestTheExampleConfigFileServes(t *testing.T) {
	_, srv := serve(t, Config{Protection: Loadshed, ConfigFile: "../loadshed.yaml"})
	if status, _ := do(t, srv, http.MethodPost, "/v1/charges?work=0s"); status != http.StatusCreated {
		t.Fatalf("POST /v1/charges behind examples/server/loadshed.yaml: %d, want 201", status)
	}
}

func TestDownstreamHoldsAConnectionPerRequest(t *testing.T) {
	svc, srv := serve(t, Config{Protection: Unprotected, Downstream: DownstreamConfig{Pool: 1, Latency: 40 * time.Millisecond}})
	// Two requests on a pool of one: the second waits for the first's
	// connection, so together they take at least two latencies.
	start := time.Now()
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := srv.Client().Get(srv.URL + "/v1/charges?work=0s")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 2 {
		if st := <-done; st != http.StatusOK {
			t.Fatalf("status %d, want 200", st)
		}
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("two calls on a pool of one took %s, want at least 80ms", d)
	}
	// Three times slower from now on.
	if status, body := do(t, srv, http.MethodPost, "/admin/downstream?slowdown=3"); status != http.StatusNoContent {
		t.Fatalf("slowdown=3: %d %s", status, body)
	}
	start = time.Now()
	do(t, srv, http.MethodGet, "/v1/charges?work=0s")
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("a call at a third of the speed took %s, want at least 120ms", d)
	}
	for _, bad := range []string{"0.5", "x", "1000"} {
		if status, _ := do(t, srv, http.MethodPost, "/admin/downstream?slowdown="+bad); status != http.StatusBadRequest {
			t.Errorf("slowdown=%s: %d, want 400", bad, status)
		}
	}
	if n := svc.Stats().Count(shed.Default, OK); n != 3 {
		t.Errorf("counted %d ok, want 3 (the admin calls are not counted)", n)
	}
	if _, err := New(Config{Downstream: DownstreamConfig{Pool: -1}}); err == nil {
		t.Error("a negative pool: no error")
	}
	_, plain := serve(t, Config{Protection: Unprotected})
	if status, _ := do(t, plain, http.MethodPost, "/admin/downstream?slowdown=3"); status != http.StatusNotFound {
		t.Errorf("slowdown without a downstream: %d, want 404", status)
	}
}

// /metrics has, per priority, a histogram of the time requests answered
// 2xx spent inside the handler chain: one served critical request with no
// work lands in the first buckets, and counts once; refused requests do
// not count.
func TestMetricsServedTimes(t *testing.T) {
	_, srv := serve(t, Config{Protection: BlindLimit, GlobalRate: 1})
	if status, _ := do(t, srv, http.MethodPost, "/v1/charges?work=0s"); status != http.StatusCreated {
		t.Fatalf("POST /v1/charges: %d", status)
	}
	if status, _ := do(t, srv, http.MethodPost, "/v1/charges?work=0s"); status != http.StatusTooManyRequests {
		t.Fatalf("second POST /v1/charges over the global rate: %d, want 429", status)
	}
	_, body := do(t, srv, http.MethodGet, "/metrics")
	for _, want := range []string{
		"# TYPE loadshed_example_served_seconds histogram",
		`loadshed_example_served_seconds_bucket{priority="critical",le="1"} 1`,
		`loadshed_example_served_seconds_bucket{priority="critical",le="+Inf"} 1`,
		`loadshed_example_served_seconds_count{priority="critical"} 1`,
		`loadshed_example_served_seconds_count{priority="default"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q:\n%s", want, body)
		}
	}
}

// A request answered 2xx says how long it spent in the handler chain, its
// work included; a refusal says nothing.
func TestServedHeaderGivesTheTimeInTheChain(t *testing.T) {
	_, srv := serve(t, Config{Protection: BlindLimit, GlobalRate: 1})
	get := func() *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges?work=20ms", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	served := get()
	if served.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/charges: %d", served.StatusCode)
	}
	d, ok := ParseServed(served.Header)
	if !ok || d < 20*time.Millisecond || d > 10*time.Second {
		t.Errorf("%s: %q reads %v, %v; want the 20ms of CPU burnt, or more", ServedHeader, served.Header.Get(ServedHeader), d, ok)
	}
	refused := get()
	if refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second POST over the global rate: %d, want 429", refused.StatusCode)
	}
	if v := refused.Header.Values(ServedHeader); len(v) != 0 {
		t.Errorf("a refusal carries %s %q", ServedHeader, v)
	}
}

func TestParseServed(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   time.Duration
		ok     bool
	}{
		{[]string{"chain;dur=12.5"}, 12500 * time.Microsecond, true},
		{[]string{`cache;desc="hit", chain; dur=0.25 ;desc="x"`}, 250 * time.Microsecond, true},
		{[]string{"db;dur=3", "chain;dur=4"}, 4 * time.Millisecond, true},
		{[]string{"chain"}, 0, false},
		{[]string{"chain;dur=-1"}, 0, false},
		{[]string{"chain;dur=NaN"}, 0, false},
		{[]string{"chain;dur=1e30"}, 0, false},
		{[]string{"chainx;dur=3"}, 0, false},
		{nil, 0, false},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add(ServedHeader, v)
		}
		if got, ok := ParseServed(h); got != tc.want || ok != tc.ok {
			t.Errorf("ParseServed(%q) = %v, %v; want %v, %v", tc.values, got, ok, tc.want, tc.ok)
		}
	}
}

// A request whose client went away while it waited, and to which nothing
// was written, is counted gone, not ok: net/http would have answered it
// 200, and the server's log read thousands served a second at 10x.
func TestClientsThatWentAwayAreCountedGone(t *testing.T) {
	st := &Stats{}
	silent := st.count(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/v1/charges", nil)
	silent.ServeHTTP(httptest.NewRecorder(), r)
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	silent.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	if ok, gone := st.Count(shed.Default, OK), st.Count(shed.Default, Gone); ok != 1 || gone != 1 {
		t.Errorf("ok %d, gone %d; want 1 each (the first client waited for its answer, the second had gone)", ok, gone)
	}
}
