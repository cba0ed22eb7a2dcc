package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

// LayerSettings tunes LoadshedCPUBound's layers; of them, Loadshed (the
// default set-up) takes only PerKeyRate and FleetPerInstance. The zero value
// of a field takes its default.
type LayerSettings struct {
	// PerKeyRate is each client's own rate limit, per second (default 1000:
	// well above what one of the demonstration's clients sends, so that
	// what the demonstration shows is shedding, not clients throttled).
	PerKeyRate int64
	// InFlight caps the requests running at once (default 8). The worker
	// layer's budget already holds non-critical requests to Workers, so
	// this cap is what bounds critical requests piling up when the CPU is
	// taken away: they wait in its queue, critical first.
	InFlight int64
	// PerKeyInFlight caps one client's requests running at once (default 32).
	PerKeyInFlight int64
	// QueueWait is the longest a request waits for an in-flight slot,
	// highest priority first (default 500ms: half the demonstration's
	// client timeout, so that a critical request waits rather than fails;
	// negative: no queue, a 503 at once over the cap).
	QueueWait time.Duration
	// QueueLength bounds the requests waiting for a slot (default 64).
	QueueLength int

	// FleetPerInstance is, with Redis, the fleet layer's capacity per live
	// instance, in requests in flight (default 10, a little above InFlight).
	// The fleet layer's default ceilings keep the last 20% of the fleet's
	// capacity for critical requests and 40% for critical and default
	// ones, and give test-mode traffic 10%: with 10 per instance, one
	// test-mode request per instance (ceilings are whole requests, rounded
	// down, so a smaller figure leaves test-mode none at all).
	FleetPerInstance int64

	// Workers is the worker layer's budget: the most non-critical requests
	// running at once (default 4). With one CPU and handlers that burn it,
	// 4 keeps the CPU busy and lets the bursts of random arrivals at half
	// the capacity through, while an admitted request waits behind at most
	// three others. Measured with -server-flags on this example: 2 refused
	// 5% of requests at 0.5x and 10-20% at 1x, and held goodput at 5x to
	// 50-60% of capacity; 4 refused none at 0.5x and kept 82-95% at 5x.
	// The layer yields the CPU after admitting, so that the requests read
	// meanwhile are answered before the work starts.
	Workers int64
	// BusyWorkers is the worker budget while the worker layer sheds
	// (default 1): once the load is past what the CPU can take, a second
	// request running only waits for the first. Measured on this example
	// at 5x (2-CPU VM): with Workers 4 alone, admitted p99
	// 33ms (7.6x the unloaded p99) and critical p50 18ms; with BusyWorkers
	// 1, p99 13.6-15.8ms, goodput 95%, and still no 503s at 0.5x (Workers
	// 1 throughout: p99 14ms, but 15% refused at 0.5x).
	BusyWorkers int64
	// WorkerQueueWait, when set, lets a request over the worker budget wait
	// that long for a worker (highest priority first, newest first once the
	// queue stands) instead of getting a 503 at once (default 0: no queue;
	// a 5ms queue with a budget of 2 did no better than a budget of 4).
	WorkerQueueWait time.Duration
	// CPUFull is the share of the CPU budget the worker layer counts as
	// saturation (default 1.25: the worker budget already keeps admitted
	// work from queueing, so the CPU may run hotter than Stripe's 0.8
	// threshold of it before requests are shed by level).
	CPUFull float64
	// SchedLatency is the Go scheduler latency the worker layer counts as
	// saturation (default 20ms: a 2ms handler holding the one CPU is not
	// overload; a machine whose other processes take the CPU away is).
	SchedLatency time.Duration
}

func (ls LayerSettings) withDefaults() LayerSettings {
	if ls.PerKeyRate == 0 {
		ls.PerKeyRate = 1000
	}
	if ls.InFlight == 0 {
		ls.InFlight = 8
	}
	if ls.PerKeyInFlight == 0 {
		ls.PerKeyInFlight = 32
	}
	if ls.QueueWait == 0 {
		ls.QueueWait = 500 * time.Millisecond
	}
	if ls.QueueLength == 0 {
		ls.QueueLength = 64
	}
	if ls.FleetPerInstance == 0 {
		ls.FleetPerInstance = 10
	}
	if ls.Workers == 0 {
		ls.Workers = 4
	}
	if ls.BusyWorkers == 0 {
		ls.BusyWorkers = min(1, ls.Workers)
	}
	if ls.CPUFull == 0 {
		ls.CPUFull = 1.25
	}
	if ls.SchedLatency == 0 {
		ls.SchedLatency = 20 * time.Millisecond
	}
	return ls
}

// httpConfig is how every protection reads a request: the client from
// X-API-Key (hashed: it is a secret), the priority from the route, or
// test-mode from the header.
func httpConfig() shedhttp.Config {
	prios := shedhttp.RoutePriorities{}
	for _, rt := range routes {
		prios[rt.method+" "+rt.pattern] = rt.priority
	}
	return shedhttp.Config{
		Key:        shedhttp.KeyHash(shedhttp.KeyHeader(KeyHeader)),
		Priorities: prios,
		Priority: func(r *http.Request, p shed.Priority) shed.Priority {
			if isTestMode(r) {
				return shed.TestMode
			}
			return p
		},
	}
}

// blindLimit is one rate limit shared by every request, whatever its
// priority, as a plain rate limiter sets it: built from loadshed's own
// ratelimit package with a single rule keyed on a constant.
func (s *Service) blindLimit(perSecond int64) (func(http.Handler) http.Handler, error) {
	if perSecond < 1 {
		return nil, fmt.Errorf("api: Config.GlobalRate must be at least 1 with %s, got %d", BlindLimit, perSecond)
	}
	store, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerSecond(perSecond), ratelimit.MemoryConfig{})
	if err != nil {
		return nil, fmt.Errorf("api: global rate limit: %w", err)
	}
	s.closers = append(s.closers, store.Close)
	global := ratelimit.By("global", func(context.Context, shed.Request) string { return "all" })
	layer, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "global", Descriptors: []ratelimit.Descriptor{global}, Store: store},
	}})
	if err != nil {
		return nil, fmt.Errorf("api: global rate limit: %w", err)
	}
	s.closers = append(s.closers, layer.Close)
	obs, err := s.watch([]shed.Layer{layer})
	if err != nil {
		return nil, err
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{layer}, Observer: obs})
	if err != nil {
		return nil, err
	}
	return shedhttp.New(chain, httpConfig())
}

// loadshed is loadshed's layers in order: each client's own rate limit
// (429), with Redis the fleet-usage shedder, then the worker layer, which
// sheds by priority when this process is busy (503). Loadshed builds the
// worker layer as it comes, worker.New(worker.DefaultConfig()), whatever the
// service waits on; LoadshedCPUBound adds the in-flight cap and builds it
// from worker.CPUBound() with the LayerSettings.
func (s *Service) loadshed(cfg Config) (func(http.Handler) http.Handler, error) {
	ls := cfg.Layers.withDefaults()
	perKey, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerSecond(ls.PerKeyRate), ratelimit.MemoryConfig{})
	if err != nil {
		return nil, fmt.Errorf("api: per-key rate limit: %w", err)
	}
	s.closers = append(s.closers, perKey.Close)
	rate, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey},
	}})
	if err != nil {
		return nil, fmt.Errorf("api: per-key rate limit: %w", err)
	}
	s.closers = append(s.closers, rate.Close)
	layers := []shed.Layer{rate}
	wc := worker.DefaultConfig()
	if cfg.Protection == LoadshedCPUBound {
		inFlight, err := inFlightCap(ls)
		if err != nil {
			return nil, err
		}
		layers = append(layers, inFlight)
		wc = cpuBound(ls)
	}
	wc.Fairness.Off = cfg.Protection == LoadshedFIFO
	fl, err := s.fleetLayer(cfg, ls)
	if err != nil {
		return nil, err
	}
	if fl != nil {
		layers = append(layers, fl)
	}
	busy, err := worker.New(wc)
	if err != nil {
		return nil, fmt.Errorf("api: worker layer: %w", err)
	}
	s.closers = append(s.closers, func() error { busy.Close(); return nil })
	layers = append(layers, busy)
	for _, l := range layers {
		if g, ok := l.(layerkit.GaugeReporter); ok {
			s.gauges = append(s.gauges, g)
		}
	}
	obs, err := s.watch(layers)
	if err != nil {
		return nil, err
	}
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: obs})
	if err != nil {
		return nil, err
	}
	return shedhttp.New(chain, httpConfig())
}

// inFlightCap is LoadshedCPUBound's cap on requests running at once, whose
// queue lets critical requests wait ahead of the rest.
func inFlightCap(ls LayerSettings) (shed.Layer, error) {
	capEnf := shed.Enforcement{
		Action: shed.Queue,
		Queue:  shed.QueueConfig{MaxLength: ls.QueueLength, MaxWait: ls.QueueWait, AdaptiveLIFO: true},
	}
	if ls.QueueWait < 0 {
		capEnf = shed.Enforcement{} // no queue: over the cap is a 503 at once
	}
	inFlight, err := concurrency.New(concurrency.Config{
		Limit:       ls.InFlight,
		PerKey:      ls.PerKeyInFlight,
		KeyBy:       concurrency.KeyByClient,
		Enforcement: capEnf,
	})
	if err != nil {
		return nil, fmt.Errorf("api: in-flight cap: %w", err)
	}
	return inFlight, nil
}

// cpuBound is the package's preset for handlers that burn CPU (a worker
// budget, Yield, the CPU counted saturated only when the whole budget is
// busy), with this example's settings.
func cpuBound(ls LayerSettings) worker.Config {
	wc := worker.CPUBound()
	wc.Workers = ls.Workers
	wc.BusyWorkers = ls.BusyWorkers
	wc.CPU.Full = ls.CPUFull
	wc.SchedLatencyTarget = ls.SchedLatency
	if ls.WorkerQueueWait > 0 {
		wc.Enforcement = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{
			MaxLength: ls.QueueLength, MaxWait: ls.WorkerQueueWait, AdaptiveLIFO: true,
		}}
	}
	return wc
}
