// Package api is the example service of examples/server and
// examples/overload: a small payments API on a chi router, its routes
// annotated with priorities, its handlers burning CPU on request, behind one
// of three protections (none, a priority-blind global rate limit, or
// loadshed's layers), with counters of what it admitted and shed.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/statuspage"
)

// Protection names what stands in front of the handlers.
type Protection string

// The protections the overload demonstration compares.
const (
	// Unprotected runs every request.
	Unprotected Protection = "none"
	// BlindLimit is one global rate limit at the service's capacity, blind
	// to priority: what a user of a plain rate limiter (httprate, say)
	// would set.
	BlindLimit Protection = "blind-limit"
	// Loadshed is loadshed's default set-up, the same whatever the service
	// waits on: a per-key rate limit, the fleet-usage shedder (with Redis)
	// and the worker layer as worker.New(worker.DefaultConfig()) builds it,
	// which finds the bottleneck and its capacity itself.
	Loadshed Protection = "loadshed"
	// LoadshedCPUBound is the set-up tuned for handlers that burn one CPU,
	// kept to compare against the default: the per-key rate limit, an
	// in-flight cap of 8 with a priority queue, the fleet-usage shedder and
	// worker.CPUBound() with a worker budget (LayerSettings).
	LoadshedCPUBound Protection = "loadshed-cpubound"
	// LoadshedFIFO is the default set-up with fair share turned off
	// (worker.Config.Fairness.Off): the requests of one priority are served
	// in arrival order, whoever sent them. It is there to compare: what
	// fair share costs a service whose clients are alike, and what it
	// saves one whose client floods.
	LoadshedFIFO Protection = "loadshed-fifo"
)

// ParseProtection reads a protection's name.
func ParseProtection(s string) (Protection, error) {
	switch p := Protection(s); p {
	case Unprotected, BlindLimit, Loadshed, LoadshedCPUBound, LoadshedFIFO:
		return p, nil
	}
	return "", fmt.Errorf("api: unknown protection %q (want %s, %s, %s, %s or %s)", s, Unprotected, BlindLimit, Loadshed, LoadshedCPUBound, LoadshedFIFO)
}

// The routes and their priorities. A request with X-Test-Mode: true is
// test-mode traffic whatever its route.
var routes = []struct {
	method, pattern string
	priority        shed.Priority
}{
	{http.MethodPost, "/v1/charges", shed.Critical},
	{http.MethodGet, "/v1/charges", shed.Default},
	{http.MethodGet, "/v1/reports", shed.Sheddable},
}

// TestModeHeader marks test-mode traffic.
const TestModeHeader = "X-Test-Mode"

// KeyHeader carries the client's API key.
const KeyHeader = "X-API-Key"

// ServedHeader is the response header in which a request answered 2xx
// says how long it spent inside the server's handler chain, from the
// first middleware's entry to its answer's header (a Server-Timing
// metric, "chain;dur=" and milliseconds). Beside the latency a client
// sees, it tells the time the protection can act on from the time spent
// before any middleware runs (the network, the Go runtime getting to the
// connection, net/http reading the request) or after the answer is
// written. Refusals do not carry it: it would add to what each one costs.
const ServedHeader = "Server-Timing"

// servedMetric is the Server-Timing metric ServedHeader carries.
const servedMetric = "chain"

// MaxWork bounds ?work=, so that one request cannot hold the CPU for long.
const MaxWork = time.Second

// DefaultWork is the CPU a request burns when it does not say.
const DefaultWork = time.Millisecond

// Config configures a Service.
type Config struct {
	// Protection is what stands in front of the handlers (default Loadshed).
	Protection Protection
	// GlobalRate is BlindLimit's limit, in requests per second for all
	// clients together. Required with BlindLimit.
	GlobalRate int64
	// Layers tunes LoadshedCPUBound's layers, and Loadshed's per-key rate
	// limit and fleet layer (zero: the defaults).
	Layers LayerSettings
	// Downstream, when its Pool is set, makes every API request hold one
	// connection of a simulated downstream (a database, another service)
	// for its latency, as most API handlers do: the CPU stays nearly idle
	// and the pool is the bottleneck.
	Downstream DownstreamConfig
	// Redis is the address of the Redis server the fleet layer shares
	// counts through; empty: this process alone, in memory.
	Redis string
	// Instance names this process in the fleet (default: host and pid).
	Instance string
	// FleetPrefix starts the fleet layer's Redis keys; instances sharing
	// capacity share it (default: the fleet layer's).
	FleetPrefix string
	// ConfigFile, with Loadshed, takes the layers from this file (see
	// package config) instead of Layers, and follows its changes: Watch
	// reloads it. Redis, Instance and FleetPrefix then come from the file.
	ConfigFile string
}

// Service is the example API with its protection.
type Service struct {
	handler http.Handler
	stats   *Stats
	gauges  []layerkit.GaugeReporter
	closers []func() error
	burner  *burner
	down    *downstream  // nil without Config.Downstream
	live    *config.Live // with Config.ConfigFile
	status  *shedstatus.Recorder
}

// watch starts the status page's recorder of layers: the chain's observer.
func (s *Service) watch(layers []shed.Layer) (shed.Observer, error) {
	rec, err := shedstatus.New(shedstatus.Config{Layers: layers})
	if err != nil {
		return nil, fmt.Errorf("api: status page: %w", err)
	}
	s.status = rec
	s.closers = append(s.closers, rec.Close)
	return rec, nil
}

// New builds the service.
func New(cfg Config) (*Service, error) {
	if cfg.Protection == "" {
		cfg.Protection = Loadshed
	}
	s := &Service{stats: &Stats{}, burner: newBurner()}
	if cfg.Downstream.Pool > 0 {
		d, err := newDownstream(cfg.Downstream)
		if err != nil {
			return nil, err
		}
		s.down = d
	} else if cfg.Downstream.Pool < 0 {
		return nil, fmt.Errorf("api: Downstream.Pool must not be negative, got %d", cfg.Downstream.Pool)
	}
	var protect func(http.Handler) http.Handler
	var err error
	switch cfg.Protection {
	case Unprotected:
	case BlindLimit:
		protect, err = s.blindLimit(cfg.GlobalRate)
	case Loadshed, LoadshedCPUBound, LoadshedFIFO:
		if cfg.ConfigFile != "" {
			protect, err = s.fromFile(cfg.ConfigFile)
		} else {
			protect, err = s.loadshed(cfg)
		}
	default:
		_, err = ParseProtection(string(cfg.Protection))
	}
	if err != nil {
		s.Close()
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(s.stats.count)
	// Health checks and scrapes are answered before any protection, so they
	// are never shed nor counted against anyone.
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	r.Get("/metrics", s.metrics)
	r.Post("/admin/downstream", s.setDownstream)
	if s.status != nil {
		// A real service serves it on an admin port or behind
		// authentication; the example listens on loopback.
		r.Get(statuspage.Path, statuspage.New(s.status, statuspage.Options{Title: "example API"}).ServeHTTP)
	}
	r.Group(func(r chi.Router) {
		if protect != nil {
			r.Use(protect)
		}
		r.Post("/v1/charges", s.work(http.StatusCreated, `{"id":"ch_1","status":"succeeded"}`))
		r.Get("/v1/charges", s.work(http.StatusOK, `{"data":[{"id":"ch_1"}]}`))
		r.Get("/v1/reports", s.work(http.StatusOK, `{"report":"monthly","rows":[]}`))
	})
	s.handler = r
	return s, nil
}

// fromFile puts the layers of a configuration file in front of the
// handlers. The example's own reading of requests (the client from
// X-API-Key, test-mode from its header) is the base the file's http section
// refines.
func (s *Service) fromFile(path string) (func(http.Handler) http.Handler, error) {
	// The file's layers change on reload: the page learns them from their
	// decisions, by name, without their gauges.
	obs, err := s.watch(nil)
	if err != nil {
		return nil, err
	}
	live, err := config.Open(path, config.Options{HTTP: httpConfig(), Observer: obs})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.live = live
	s.closers = append(s.closers, live.Close)
	return live.Middleware(), nil
}

// Watch follows the configuration file's changes (and SIGHUP) until ctx
// ends; without Config.ConfigFile it returns at once.
func (s *Service) Watch(ctx context.Context) error {
	if s.live == nil {
		return nil
	}
	return s.live.Watch(ctx)
}

// Handler serves the API.
func (s *Service) Handler() http.Handler { return s.handler }

// Stats are the service's counters.
func (s *Service) Stats() *Stats { return s.stats }

// Close stops what the protection runs in the background.
func (s *Service) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// work answers a route after holding a downstream connection (with
// Config.Downstream) and burning ?work= of CPU (default DefaultWork).
func (s *Service) work(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.down != nil {
			if err := s.down.call(r.Context()); err != nil {
				// The client has gone: nobody reads the answer.
				http.Error(w, err.Error(), http.StatusGatewayTimeout)
				return
			}
		}
		d := DefaultWork
		if v := r.URL.Query().Get("work"); v != "" {
			var err error
			d, err = time.ParseDuration(v)
			if err != nil || d < 0 || d > MaxWork {
				http.Error(w, fmt.Sprintf("work must be a duration between 0 and %s", MaxWork), http.StatusBadRequest)
				return
			}
		}
		s.burner.burn(d)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body+"\n")
	}
}

// priorityOf is the priority the routes table and the test-mode header give
// a request; the counters use it, and it is what the protection sees.
func priorityOf(r *http.Request) shed.Priority {
	if isTestMode(r) {
		return shed.TestMode
	}
	for _, rt := range routes {
		if r.Method == rt.method && r.URL.Path == rt.pattern {
			return rt.priority
		}
	}
	return shed.Default
}

func isTestMode(r *http.Request) bool {
	v := r.Header.Get(TestModeHeader)
	return v != "" && strings.EqualFold(v, "true")
}

// Stats counts requests by priority and answer, and requests in flight.
type Stats struct {
	inFlight atomic.Int64
	counts   [shed.NumPriorities][numAnswers]atomic.Int64
	// served is, per priority, how long the requests answered 2xx spent
	// inside the server's handler chain (protection, queueing and work),
	// from the first middleware's entry to its return. Set beside the
	// latency a client sees, it tells the time loadshed can act on from
	// the time spent before any middleware runs (the network, the Go
	// runtime, net/http reading the request) or after it returns.
	served [shed.NumPriorities]servedTimes
}

// servedBuckets are the served-time histogram's upper bounds, in seconds.
var servedBuckets = [...]float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}

// servedTimes is one priority's served-time histogram.
type servedTimes struct {
	counts [len(servedBuckets) + 1]atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Int64                         // ns
}

func (h *servedTimes) observe(d time.Duration) {
	i := 0
	for i < len(servedBuckets) && d.Seconds() > servedBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Answer is a class of response the counters tell apart.
type Answer int

// The classes of answers.
const (
	OK        Answer = iota // 2xx
	Throttled               // 429
	Shed                    // 503
	Other                   // anything else
	// Gone: the client went away before anything was written (it gave up
	// while its request was queued). Counted as 2xx, these read as
	// thousands of requests served a second on a server that serves a few
	// hundred.
	Gone
	numAnswers
)

var answerWords = [numAnswers]string{"ok", "429", "503", "other", "gone"}

func (a Answer) String() string { return answerWords[a] }

func answerOf(status int) Answer {
	switch {
	case status >= 200 && status < 300:
		return OK
	case status == http.StatusTooManyRequests:
		return Throttled
	case status == http.StatusServiceUnavailable:
		return Shed
	}
	return Other
}

// Count is how many requests of priority p got answer a so far.
func (st *Stats) Count(p shed.Priority, a Answer) int64 { return st.counts[p.Index()][a].Load() }

// InFlight is how many API requests are being answered now.
func (st *Stats) InFlight() int64 { return st.inFlight.Load() }

type statusWriter struct {
	http.ResponseWriter
	status int
	start  time.Time // when the first middleware was entered
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if answerOf(code) == OK {
			w.Header().Set(ServedHeader, servedTiming(time.Since(w.start)))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// servedTiming is ServedHeader's value for a request d spent inside the
// handler chain.
func servedTiming(d time.Duration) string {
	return servedMetric + ";dur=" + strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// ParseServed returns the time inside the handler chain that a response's
// ServedHeader gives, and false when it gives none.
func ParseServed(h http.Header) (time.Duration, bool) {
	for _, v := range h.Values(ServedHeader) {
		for _, m := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(m), ";")
			if strings.TrimSpace(name) != servedMetric {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || strings.TrimSpace(k) != "dur" {
					continue
				}
				ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || !(ms >= 0 && ms <= float64(time.Hour/time.Millisecond)) {
					return 0, false
				}
				return time.Duration(ms * float64(time.Millisecond)), true
			}
		}
	}
	return 0, false
}

func (st *Stats) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/admin/") || strings.HasPrefix(r.URL.Path, "/debug/") {
			next.ServeHTTP(w, r)
			return
		}
		p := priorityOf(r)
		st.inFlight.Add(1)
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, start: start}
		defer func() {
			st.inFlight.Add(-1)
			a := answerOf(sw.status)
			switch {
			case sw.status == 0 && r.Context().Err() != nil:
				a = Gone
			case sw.status == 0:
				a = OK // net/http answers 200 for a handler that writes nothing
			}
			st.counts[p.Index()][a].Add(1)
			if a == OK {
				st.served[p.Index()].observe(time.Since(start))
			}

		}()
		next.ServeHTTP(sw, r)
	})
}

// metrics answers in Prometheus's text format: the counters, and every
// gauge the layers report.
func (s *Service) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	b.WriteString("# TYPE loadshed_example_requests_total counter\n")
	for _, p := range shed.Priorities() {
		for a := Answer(0); a < numAnswers; a++ {
			fmt.Fprintf(&b, "loadshed_example_requests_total{priority=%q,answer=%q} %d\n", p, a, s.stats.Count(p, a))
		}
	}
	b.WriteString("# HELP loadshed_example_served_seconds Time the requests answered 2xx spent inside the handler chain, from the first middleware's entry to its return.\n")
	b.WriteString("# TYPE loadshed_example_served_seconds histogram\n")
	for _, p := range shed.Priorities() {
		h := &s.stats.served[p.Index()]
		var n int64
		for i := range h.counts {
			n += h.counts[i].Load()
			le := "+Inf"
			if i < len(servedBuckets) {
				le = strconv.FormatFloat(servedBuckets[i], 'g', -1, 64)
			}
			fmt.Fprintf(&b, "loadshed_example_served_seconds_bucket{priority=%q,le=%q} %d\n", p, le, n)
		}
		fmt.Fprintf(&b, "loadshed_example_served_seconds_sum{priority=%q} %s\n", p, strconv.FormatFloat(time.Duration(h.sum.Load()).Seconds(), 'g', -1, 64))
		fmt.Fprintf(&b, "loadshed_example_served_seconds_count{priority=%q} %d\n", p, n)
	}
	workCPU, worked := s.WorkCPU()
	b.WriteString("# HELP loadshed_example_work_cpu_seconds_total CPU time the requests' work (?work=) took, on their threads' CPU clocks.\n")
	b.WriteString("# TYPE loadshed_example_work_cpu_seconds_total counter\n")
	fmt.Fprintf(&b, "loadshed_example_work_cpu_seconds_total %s\n", strconv.FormatFloat(workCPU.Seconds(), 'g', -1, 64))
	b.WriteString("# TYPE loadshed_example_work_timed_total counter\n")
	fmt.Fprintf(&b, "loadshed_example_work_timed_total %d\n", worked)
	b.WriteString("# TYPE loadshed_example_in_flight gauge\n")
	fmt.Fprintf(&b, "loadshed_example_in_flight %d\n", s.stats.InFlight())
	if len(s.gauges) > 0 {
		b.WriteString("# TYPE loadshed_layer_gauge gauge\n")
	}
	for _, g := range s.gauges {
		g.ReportGauges(func(g layerkit.Gauge) {
			fmt.Fprintf(&b, "loadshed_layer_gauge{layer=%q,name=%q,priority=%q,signal=%q} %s\n",
				g.Layer, g.Name, g.Priority, g.Signal, strconv.FormatFloat(g.Value, 'g', -1, 64))
		})
	}
	io.WriteString(w, b.String())
}

// LogEvery writes one line per interval to out, until stop is closed: what
// was admitted and shed, by priority, since the last line, and the layers'
// gauges that say why (the worker layer's signals and shed level, the
// fleet's usage).
func (s *Service) LogEvery(out io.Writer, every time.Duration, stop <-chan struct{}) {
	st := s.stats
	var last [shed.NumPriorities][numAnswers]int64
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var line strings.Builder
		var now [shed.NumPriorities][numAnswers]int64
		for _, p := range shed.Priorities() {
			for a := Answer(0); a < numAnswers; a++ {
				now[p.Index()][a] = st.Count(p, a)
			}
		}
		fmt.Fprintf(&line, "%s in-flight=%d", time.Now().Format("15:04:05"), st.InFlight())
		for _, a := range []Answer{OK, Throttled, Shed, Gone} {
			fmt.Fprintf(&line, " | %s", a)
			for i := shed.NumPriorities - 1; i >= 0; i-- {
				fmt.Fprintf(&line, " %s=%d", shed.Priorities()[i], now[i][a]-last[i][a])
			}
		}
		last = now
		for _, g := range s.gauges {
			g.ReportGauges(func(g layerkit.Gauge) {
				switch g.Name {
				case layerkit.GaugeUtilization:
					fmt.Fprintf(&line, " %s.%s=%.2f", g.Layer, g.Signal, g.Value)
				case layerkit.GaugeShedLevel:
					fmt.Fprintf(&line, " %s.level=%.2f", g.Layer, g.Value)
				case layerkit.GaugeLimit, layerkit.GaugeQueued:
					fmt.Fprintf(&line, " %s.%s=%.0f", g.Layer, g.Name, g.Value)
				case layerkit.GaugeUsage:
					fmt.Fprintf(&line, " %s.usage.%s=%.0f", g.Layer, g.Priority, g.Value)
				}
			})
		}
		fmt.Fprintln(out, line.String())
	}
}
