package shedstatus

import (
	"math"
	"slices"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Snapshot is a chain's state at one moment, ready to be shown or encoded
// as JSON. Keys in it are masked unless the Recorder was told to show them.
type Snapshot struct {
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// EverySeconds is the sampling period: the rates are per second over
	// the last one, and History has a point per period.
	EverySeconds float64 `json:"every_seconds"`
	// KeysMasked says whether clients' keys are masked.
	KeysMasked bool `json:"keys_masked"`
	// Layers are the chain's layers, in order.
	Layers []Layer `json:"layers"`
	// Rejections are the last rejections kept, newest first.
	Rejections []Rejection `json:"rejections"`
	// RejectionsTotal counts every rejection seen, kept or not.
	RejectionsTotal uint64 `json:"rejections_total"`
	// Rules are a rate limit service's rules with their counts (see
	// Config.Rules); empty otherwise.
	Rules []Rule `json:"rules,omitempty"`
	// Reload says how the last configuration reload went (Config.Reload);
	// nil otherwise.
	Reload *Reload `json:"reload,omitempty"`
}

// Layer is one layer's state.
type Layer struct {
	// Name is the layer's Name.
	Name string `json:"name"`
	// Kind is the layer's Go type ("worker.Layer"); empty for a layer
	// known only by its events.
	Kind string `json:"kind,omitempty"`
	// Gauges are the readings the layer reports now (layerkit.Gauge).
	Gauges []Reading `json:"gauges"`
	// Priorities are the decisions by priority, lowest first.
	Priorities []PriorityRates `json:"priorities"`
	// ReportsClients says whether the layer shares its capacity among
	// clients (layerkit.ClientReporter); Clients are then the largest.
	ReportsClients bool     `json:"reports_clients"`
	Clients        []Client `json:"clients,omitempty"`
	// History has a point per sampling period, oldest first.
	History []Point `json:"history"`
}

// Gauge returns the layer's first reading named name, and whether it
// reported one.
func (l *Layer) Gauge(name string) (float64, bool) {
	for _, g := range l.Gauges {
		if g.Name == name {
			return g.Value, true
		}
	}
	return 0, false
}

// Reading is one gauge reading (see layerkit.Gauge).
type Reading struct {
	Name     string  `json:"name"`
	Priority string  `json:"priority,omitempty"`
	Signal   string  `json:"signal,omitempty"`
	Value    float64 `json:"value"`
}

// PriorityRates are one priority's decisions at one layer: per second over
// the last sampling period, and in total since the Recorder started.
type PriorityRates struct {
	Priority         string  `json:"priority"`
	Admitted         float64 `json:"admitted_per_second"`
	Shed             float64 `json:"shed_per_second"`
	WouldReject      float64 `json:"would_reject_per_second"`
	AdmittedTotal    uint64  `json:"admitted_total"`
	ShedTotal        uint64  `json:"shed_total"`
	WouldRejectTotal uint64  `json:"would_reject_total"`
}

// Client is what one client holds of a layer (layerkit.ClientShare), its
// key masked unless the Recorder shows keys.
type Client struct {
	Key      string  `json:"key"`
	Priority string  `json:"priority"`
	InFlight int64   `json:"in_flight"`
	Queued   int     `json:"queued"`
	Share    float64 `json:"share"`
}

// Point is one sample of a layer. Gauges the layer does not report read 0.
type Point struct {
	// Time is the sample's time in Unix milliseconds.
	Time      int64   `json:"t"`
	InFlight  float64 `json:"in_flight"`
	Queued    float64 `json:"queued"`
	Limit     float64 `json:"limit"`
	ShedLevel float64 `json:"shed_level"`
	// Admitted and Shed are per second over the period, every priority
	// together.
	Admitted float64 `json:"admitted_per_second"`
	Shed     float64 `json:"shed_per_second"`
}

// Rejection is one rejection kept in the ring. It has no key: events
// carry none.
type Rejection struct {
	Time     time.Time `json:"time"`
	Layer    string    `json:"layer"`
	Policy   string    `json:"policy,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Priority string    `json:"priority,omitempty"`
	Status   int       `json:"status,omitempty"`
	Route    string    `json:"route,omitempty"`
}

// Rule is one limit of a rate limit service, as envoyproxy/ratelimit's
// /rlconfig lists it, with what it decided since it was loaded.
type Rule struct {
	// Key is the rule's path: "domain.key_value.key".
	Key string `json:"key"`
	// Limit is the limit as /rlconfig prints it: "unit=MINUTE
	// requests_per_unit=10", with the name and shadow_mode when set.
	Limit  string `json:"limit"`
	Shadow bool   `json:"shadow_mode,omitempty"`
	// Hits counts the units asked of the rule; OverLimit those refused
	// (or, in shadow mode, that would have been); NearLimit those
	// admitted within the last fifth of the limit.
	Hits      uint64 `json:"total_hits"`
	OverLimit uint64 `json:"over_limit"`
	NearLimit uint64 `json:"near_limit"`
}

// Reload says how the last configuration reload went.
type Reload struct {
	// Time is when it was tried; zero when none was since the start.
	Time time.Time `json:"time"`
	// Error is why it was refused; empty when it was applied.
	Error string `json:"error,omitempty"`
	// Applied and Refused count the reloads since the start.
	Applied int64 `json:"applied"`
	Refused int64 `json:"refused"`
}

// Snapshot returns the state now, with the history points taken after
// since (all of them when since is zero): a page that polls asks only for
// what it has not drawn yet.
func (r *Recorder) Snapshot(since time.Time) Snapshot {
	s := Snapshot{Time: r.clock.Now(), EverySeconds: r.every.Seconds(), KeysMasked: !r.cfg.ShowKeys,
		RejectionsTotal: r.rejected.Load()}
	ls := *r.layers.Load()
	s.Layers = make([]Layer, len(ls))
	for i, l := range ls {
		out := &s.Layers[i]
		out.Name, out.Kind = l.name, l.kind
		out.Gauges = []Reading{}
		if l.gauges != nil {
			l.gauges.ReportGauges(func(g layerkit.Gauge) {
				if math.IsNaN(g.Value) || math.IsInf(g.Value, 0) {
					return
				}
				rd := Reading{Name: g.Name, Signal: g.Signal, Value: g.Value}
				if g.Priority != shed.Unset {
					rd.Priority = g.Priority.String()
				}
				out.Gauges = append(out.Gauges, rd)
			})
		}
		if l.clients != nil {
			out.ReportsClients = true
			for _, c := range l.clients.TopClients(r.cfg.TopClients) {
				out.Clients = append(out.Clients, Client{Key: r.mask(c.Key), Priority: c.Priority.String(),
					InFlight: c.InFlight, Queued: c.Queued, Share: c.Share})
			}
		}
	}
	r.mu.Lock()
	for i, l := range ls {
		out := &s.Layers[i]
		out.Priorities = make([]PriorityRates, shed.NumPriorities)
		for j, p := range shed.Priorities() {
			out.Priorities[j] = PriorityRates{Priority: p.String(),
				Admitted: l.rates[j][0], Shed: l.rates[j][1], WouldReject: l.rates[j][2],
				AdmittedTotal: l.counts[j].admitted.Load(), ShedTotal: l.counts[j].rejected.Load(),
				WouldRejectTotal: l.counts[j].wouldReject.Load()}
		}
		out.History = make([]Point, 0, len(l.hist))
		for k := range l.hist {
			p := l.hist[(l.histNext+k)%len(l.hist)]
			if since.IsZero() || p.Time > since.UnixMilli() {
				out.History = append(out.History, p)
			}
		}
	}
	r.mu.Unlock()

	r.ringMu.Lock()
	s.Rejections = make([]Rejection, 0, r.ringLen)
	for k := 1; k <= r.ringLen; k++ {
		s.Rejections = append(s.Rejections, r.ring[(r.ringNext-k+len(r.ring))%len(r.ring)])
	}
	r.ringMu.Unlock()

	if r.cfg.Rules != nil {
		s.Rules = slices.Clone(r.cfg.Rules())
	}
	if r.cfg.Reload != nil {
		rl := r.cfg.Reload()
		s.Reload = &rl
	}
	return s
}
