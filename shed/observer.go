package shed

import "time"

// EventKind says what happened to a request at one layer.
type EventKind uint8

const (
	// Admitted: the layer granted a lease (possibly over its limit, after a
	// wait, or from a fallback estimate: see the Event's flags).
	Admitted EventKind = iota
	// Rejected: the layer said no.
	Rejected
	// WouldReject: the layer is in dry run and would have said no; the
	// request was admitted.
	WouldReject
	// Released: a lease was given back with an Outcome.
	Released
)

func (k EventKind) String() string {
	switch k {
	case Admitted:
		return "admitted"
	case Rejected:
		return "rejected"
	case WouldReject:
		return "would_reject"
	case Released:
		return "released"
	}
	return "event(?)"
}

// Event is one decision or release at one layer. It carries no key, so that
// metrics built from it keep a bounded number of label values.
type Event struct {
	Layer    string
	Priority Priority
	Kind     EventKind
	// Outcome is set for Released.
	Outcome Outcome
	// Queued is set when the request waited in a queue; Wait says how long.
	Queued bool
	Wait   time.Duration
	// Over is set when the request was admitted above its limit (soft or
	// elastic allowance).
	Over bool
	// Fallback is set when the layer decided from a local estimate because
	// its shared store did not answer.
	Fallback bool
	// Latency is how long the layer took to decide (including any wait);
	// for Released, how long the chain held the request's leases.
	Latency time.Duration
	// Status is the rejection's HTTP status, for Rejected.
	Status int
	// Policy names the limit that decided (a rule's or limit's name, such
	// as "per-key" or "in-flight"); empty when the layer has one limit.
	// Policies are a bounded set, so metrics may label by them.
	Policy string
	// Route is the request's route pattern ("GET /v1/charges/{id}"), never
	// the raw path, so that it stays a bounded set.
	Route string
	// Reason is the rejection's short, client-safe explanation ("queue
	// full"), for Rejected; a status page shows it beside the layer and
	// policy. Layers write it from a bounded set of phrases, but metrics
	// should not label by it.
	Reason string
}

// Observer receives every decision. Observe is called outside any lock of
// the layers, on the request's goroutine, so it must be quick and safe for
// concurrent use; it must not call back into the layer that reported.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans one event out to several observers, in order.
type Observers []Observer

// Observe calls every observer.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// admittedEvent describes a lease just granted by layer.
func admittedEvent(layer string, req *Request, l *Lease, latency time.Duration) Event {
	k := Admitted
	if l.DryRun {
		k = WouldReject
	}
	return Event{Layer: layer, Priority: req.Priority, Kind: k, Queued: l.Waited > 0, Wait: l.Waited,
		Over: l.Over, Fallback: l.Fallback, Latency: latency, Policy: l.Quota.Policy, Route: req.Route}
}

// rejectedEvent describes a rejection, or, when rej is nil (the caller went
// away while waiting), a rejection with status 0.
func rejectedEvent(layer string, req *Request, rej *Rejection, latency time.Duration) Event {
	e := Event{Layer: layer, Priority: req.Priority, Kind: Rejected, Latency: latency, Route: req.Route}
	if rej != nil {
		e.Status = rej.Status
		e.Queued = rej.Waited > 0
		e.Wait = rej.Waited
		e.Fallback = rej.Fallback
		e.Reason = rej.Reason
		if len(rej.Policies) > 0 {
			e.Policy = rej.Policies[0].Policy
		}
	}
	return e
}
