package dashboards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/shedprom"
	"github.com/loadshed/loadshed/worker"
)

// prometheusAPI returns the address of the Prometheus scripts/prometheus.sh
// started and the file it reads scrape targets from; it skips the test when
// there is none, or fails it under scripts/test.sh
// (LOADSHED_REQUIRE_PROMETHEUS=1).
func prometheusAPI(t *testing.T) (base, targets string) {
	t.Helper()
	base, targets = os.Getenv("LOADSHED_PROMETHEUS_URL"), os.Getenv("LOADSHED_PROMETHEUS_TARGETS")
	if base == "" || targets == "" {
		msg := "LOADSHED_PROMETHEUS_URL and LOADSHED_PROMETHEUS_TARGETS are not set (./scripts/test.sh ./dashboards sets them)"
		if os.Getenv("LOADSHED_REQUIRE_PROMETHEUS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return base, targets
}

// renamed gives a layer another name, for a second layer of one package
// until every layer's Config takes a Name.
type renamed struct {
	shed.Layer
	name string
}

func (r renamed) Name() string { return r.name }

// fleetGauges adds the fleet layer's failed ticks (Stats.Failures) as its
// store errors, until the layer reports them itself.
type fleetGauges struct{ *fleet.Layer }

func (f fleetGauges) ReportGauges(emit func(layerkit.Gauge)) {
	f.Layer.ReportGauges(emit)
	emit(layerkit.Gauge{Layer: f.Name(), Name: layerkit.GaugeStoreErrors, Value: float64(f.Stats().Failures)})
}

// scenarioServer is a chi API behind every layer, with /metrics beside it.
type scenarioServer struct {
	url      string
	pressure atomic.Uint64 // float64 bits: the worker's test signal
	worker   *worker.Layer
}

func startScenarioServer(t *testing.T) *scenarioServer {
	t.Helper()
	s := &scenarioServer{}
	s.pressure.Store(math.Float64bits(0.1))

	perKey, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(20), ratelimit.MemoryConfig{})
	must(t, err)
	rate, err := ratelimit.New(ratelimit.Config{
		Rules: []ratelimit.Rule{{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey}},
		// Soft: 10 more per key above the limit (over="true"); past that, wait
		// up to 50ms for a unit, then 429.
		Enforcement: shed.Enforcement{Mode: shed.Soft, Overage: 0.5, Action: shed.Queue,
			Queue: shed.QueueConfig{MaxLength: 8, MaxWait: 50 * time.Millisecond}},
	})
	must(t, err)
	t.Cleanup(func() { rate.Close(); perKey.Close() })

	newLimit, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(5), ratelimit.MemoryConfig{})
	must(t, err)
	dry, err := ratelimit.New(ratelimit.Config{
		Rules:       []ratelimit.Rule{{Name: "new-limit", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: newLimit}},
		Enforcement: shed.Enforcement{DryRun: true},
	})
	must(t, err)
	t.Cleanup(func() { dry.Close(); newLimit.Close() })

	// A Redis nobody listens on: every decision comes from the fallback.
	redis.SetLogger(quietRedis{}) // its dial errors are the point here
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	dead := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: dead, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	shared, err := ratelimit.NewRedis(rdb, ratelimit.TokenBucket, ratelimit.PerMinute(1000), ratelimit.RedisConfig{})
	must(t, err)
	onRedis, err := ratelimit.New(ratelimit.Config{
		Rules: []ratelimit.Rule{{Name: "shared", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: shared}},
	})
	must(t, err)
	t.Cleanup(func() { onRedis.Close() })

	inFlight, err := concurrency.New(concurrency.Config{Limit: 4, Enforcement: shed.Enforcement{Action: shed.Queue,
		Queue: shed.QueueConfig{MaxLength: 4, MaxWait: 300 * time.Millisecond}}})
	must(t, err)

	// The fleet on the real Redis: a capacity of 5, so that default work
	// (a ceiling of 80%: 4) fits in the concurrency layer's limit, and
	// sheddable work (60%: 3) and test-mode work (10%: none) are shed.
	opts := redistest.Options(t)
	opts.ContextTimeoutEnabled = true
	live := redis.NewClient(opts)
	t.Cleanup(func() { live.Close() })
	usage, err := fleet.New(fleet.Config{Client: live, Prefix: redistest.Prefix(t) + ":fleet:",
		Capacity: 5, Interval: 20 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { usage.Close() })

	s.worker, err = worker.New(worker.Config{
		Interval: 20 * time.Millisecond, Recovery: 500 * time.Millisecond, RiseGain: 40,
		CPU: worker.CPUConfig{Disable: true}, SchedLatencyTarget: -1,
		Workers:     3,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 8, MaxWait: time.Second}},
		Signals: []worker.Signal{{Name: "test_pressure", Read: func() float64 {
			return math.Float64frombits(s.pressure.Load())
		}}},
	})
	must(t, err)
	t.Cleanup(func() { s.worker.Close() })

	layers := []shed.Layer{
		rate,
		renamed{dry, "ratelimit-dryrun"},
		renamed{onRedis, "ratelimit-redis"},
		inFlight,
		fleetGauges{usage},
		s.worker,
	}
	reg := prometheus.NewRegistry()
	metrics, err := shedprom.New(shedprom.Config{Registerer: reg, Layers: layers})
	must(t, err)
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: metrics})
	must(t, err)
	mw, err := shedhttp.New(chain, shedhttp.Config{
		Key: shedhttp.KeyHeader("X-API-Key"),
		Priorities: shedhttp.RoutePriorities{
			"POST /v1/charges": shed.Critical,
			"/v1/reports/*":    shed.Sheddable,
		},
		Priority: func(r *http.Request, p shed.Priority) shed.Priority {
			if r.Header.Get("X-Test-Mode") != "" {
				return shed.TestMode
			}
			return p
		},
		Skip: func(r *http.Request) bool { return r.URL.Path == "/metrics" },
	})
	must(t, err)

	r := chi.NewRouter()
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	r.Group(func(r chi.Router) {
		r.Use(mw)
		ok := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }
		r.Post("/v1/charges", ok)
		r.Get("/v1/balance", ok)
		r.Get("/v1/reports/{id}", ok)
		slow := func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(150 * time.Millisecond):
			case <-r.Context().Done():
			}
			io.WriteString(w, "ok\n")
		}
		r.Get("/v1/slow", slow)
		r.Get("/v1/reports/slow", slow)
	})
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	s.url = "http://" + ln.Addr().String()
	return s
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// send makes one request and returns its status (0 when the client gave up).
func (s *scenarioServer) send(client *http.Client, method, path, key string, testMode bool) int {
	req, _ := http.NewRequest(method, s.url+path, nil)
	req.Header.Set("X-API-Key", key)
	if testMode {
		req.Header.Set("X-Test-Mode", "1")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// drive runs the server through every kind of decision the dashboards show
// and returns how many responses of each status it saw.
func (s *scenarioServer) drive(t *testing.T) map[int]int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var mu sync.Mutex
	seen := map[int]int{}
	note := func(code int) { mu.Lock(); seen[code]++; mu.Unlock() }

	// Admitted, at every priority; test-mode shed by the fleet.
	for i := range 3 {
		key := fmt.Sprintf("user-%d", i)
		note(s.send(client, "POST", "/v1/charges", key, false))
		note(s.send(client, "GET", "/v1/balance", key, false))
		note(s.send(client, "GET", "/v1/reports/r1", key, false))
		note(s.send(client, "GET", "/v1/balance", key, true))
	}
	// One key past its rate: within the limit, over it (soft), then queued
	// and rejected with 429; the dry-run limit would reject from the 6th.
	for range 34 {
		note(s.send(client, "GET", "/v1/balance", "greedy", false))
	}
	// Concurrency: slow requests fill its 4 slots and wait in its queue (the
	// worker's budget of 3 queues one of them too), a caller gives up while
	// queued (canceled); then more than slots and queue hold: 503.
	var wg sync.WaitGroup
	slow := func(n int, prefix string) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				note(s.send(client, "GET", "/v1/slow", fmt.Sprintf("%s-%d", prefix, i), false))
			}()
		}
	}
	slow(6, "load")
	time.Sleep(30 * time.Millisecond)
	impatient := &http.Client{Timeout: 40 * time.Millisecond}
	note(s.send(impatient, "GET", "/v1/slow", "impatient", false))
	wg.Wait()
	slow(12, "flood")
	wg.Wait()
	// Fleet: sheddable work past its ceiling of 3 units in flight.
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			note(s.send(client, "GET", "/v1/reports/slow", fmt.Sprintf("reports-%d", i), false))
		}()
	}
	wg.Wait()

	// Worker: pressure past its target sheds sheddable traffic first. Wait
	// until all of it is shed (a level of 2: test-mode and sheddable): while
	// sheddable is the marginal priority, a client with no requests in the
	// last interval, as each of these is, is never its heaviest, so none of
	// them would be refused.
	s.pressure.Store(math.Float64bits(3))
	deadline := time.Now().Add(5 * time.Second)
	for s.worker.Level() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if lv := s.worker.Level(); lv < 2 {
		t.Errorf("the worker's shed level reached %.2f in 5s under pressure, not 2", lv)
	}
	for i := range 5 {
		note(s.send(client, "GET", "/v1/reports/r2", fmt.Sprintf("report-%d", i), false))
		note(s.send(client, "POST", "/v1/charges", fmt.Sprintf("report-%d", i), false))
	}
	s.pressure.Store(math.Float64bits(0.1))
	return seen
}

// promQuery evaluates expr at the server's now.
func promQuery(base, expr string) (result []json.RawMessage, err error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	return body.Data.Result, nil
}

// waitFor polls expr until it returns a series or the deadline passes.
func waitFor(t *testing.T, base, expr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		res, err := promQuery(base, expr)
		if err == nil && len(res) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %s gave no series within %v (err %v)", expr, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// layerOf is what each board's $layer stands for in the scenario: every
// layer of that kind the server runs.
var layerOf = map[string]string{
	"ratelimit":   "ratelimit.*",
	"concurrency": "concurrency",
	"fleet":       "fleet",
	"worker":      "worker",
}

func TestDashboardsAgainstPrometheus(t *testing.T) {
	base, targets := prometheusAPI(t)
	s := startScenarioServer(t)
	instance := strings.TrimPrefix(s.url, "http://")
	group := fmt.Sprintf(`[{"targets": [%q]}]`, instance)
	must(t, os.WriteFile(targets+".tmp", []byte(group), 0o644))
	must(t, os.Rename(targets+".tmp", targets)) // atomically: Prometheus watches the file
	t.Cleanup(func() { os.WriteFile(targets, []byte("[]"), 0o644) })
	up := fmt.Sprintf(`up{instance=%q} == 1`, instance)
	waitFor(t, base, up, 20*time.Second)

	seen := s.drive(t)
	t.Logf("scenario responses by status: %v", seen)
	for _, code := range []int{200, 429, 503} {
		if seen[code] == 0 {
			t.Errorf("the scenario got no %d response", code)
		}
	}
	// Two scrapes after the scenario ended, so the last values are in.
	end := time.Now()
	waitFor(t, base, fmt.Sprintf(`timestamp(up{instance=%q}) > %d`, instance, end.Add(1100*time.Millisecond).Unix()), 10*time.Second)

	// The metric names Prometheus holds for this server.
	scraped := map[string]bool{}
	res, err := promQuery(base, fmt.Sprintf(`count by (__name__) ({instance=%q, __name__=~"loadshed_.+"})`, instance))
	must(t, err)
	for _, r := range res {
		var s struct {
			Metric map[string]string `json:"metric"`
		}
		must(t, json.Unmarshal(r, &s))
		scraped[s.Metric["__name__"]] = true
	}

	// What Prometheus scraped agrees with what the clients got: every 429
	// and 503 is one rejection counted.
	for _, code := range []int{429, 503} {
		res, err := promQuery(base, fmt.Sprintf(`sum(loadshed_requests_total{instance=%q,result="rejected",status="%d"})`, instance, code))
		must(t, err)
		var v struct {
			Value [2]any `json:"value"`
		}
		if len(res) != 1 || json.Unmarshal(res[0], &v) != nil || v.Value[1] != fmt.Sprint(seen[code]) {
			t.Errorf("rejections with status %d in Prometheus: %s; the clients got %d", code, res, seen[code])
		}
	}

	evaluated, withData := 0, 0
	for _, b := range boards {
		vars := strings.NewReplacer(
			"$job", "loadshed", "$instance", instance, "$layer", layerOf[b.layer], "$__rate_interval", "1m")
		for _, p := range b.panels {
			for i, tg := range p.targets {
				where := fmt.Sprintf("%s: %q target %c", b.file, p.title, 'A'+i)
				expr := vars.Replace(tg.expr)
				evaluated++
				res, err := promQuery(base, expr)
				if err != nil {
					t.Errorf("%s: %s\n  %s", where, err, expr)
					continue
				}
				for _, m := range metricRef.FindAllString(tg.expr, -1) {
					if !scraped[m] {
						t.Errorf("%s: %s was not scraped from the server", where, m)
					}
				}
				if len(res) == 0 {
					t.Errorf("%s: no series, though the scenario produced its events\n  %s", where, expr)
					continue
				}
				withData++
			}
		}
	}
	t.Logf("%d panel queries evaluated against Prometheus, %d with data", evaluated, withData)
}
