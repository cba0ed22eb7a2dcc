package shed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// MaxLayers is the most layers one chain runs. A Grant keeps its leases
// inline, so admitting a request allocates nothing.
const MaxLayers = 8

// Config configures a Chain.
type Config struct {
	// Layers run in order, each wrapping the next: a request reaches layer
	// i+1 only when layers 0..i admitted it. Required: 1 to MaxLayers.
	Layers []Layer
	// Observer receives every decision and release; nil records nothing.
	Observer Observer
	// Clock times decisions for the observer (default SystemClock).
	Clock Clock
}

// Chain runs layers in sequence for each request. A later layer's rejection
// releases what earlier layers granted, in reverse order, with Unused. It is
// safe for concurrent use.
type Chain struct {
	layers []Layer
	names  []string
	obs    Observer
	ctxObs ContextObserver // obs, when it wants the request's context
	clock  Clock
	// readsRoute: the observer or some layer reads Request.Route.
	readsRoute bool
	// timed: the observer reads Event.Latency, so the chain reads the
	// clock at each layer boundary and release.
	timed bool

	closeOnce sync.Once
	closeErr  error
}

// RouteReader is implemented by layers that can tell whether they read
// Request.Route. Finding a request's route pattern can cost a front end
// work (the HTTP middleware, mounted before the router, routes the request
// a second time), which it skips when nothing in the chain reads the
// route (Chain.ReadsRoute). A layer that does not implement RouteReader is
// taken to read it.
type RouteReader interface {
	ReadsRoute() bool
}

// ReadsRoute reports whether anything the chain runs reads Request.Route:
// its observer (events carry the route) or a layer that does not say it
// ignores it (RouteReader).
func (c *Chain) ReadsRoute() bool { return c.readsRoute }

// NewChain checks cfg and builds the chain.
func NewChain(cfg Config) (*Chain, error) {
	if len(cfg.Layers) == 0 {
		return nil, errors.New("shed: Config.Layers is empty: a chain needs at least one layer")
	}
	if len(cfg.Layers) > MaxLayers {
		return nil, fmt.Errorf("shed: Config.Layers has %d layers, at most %d are supported", len(cfg.Layers), MaxLayers)
	}
	c := &Chain{layers: make([]Layer, len(cfg.Layers)), names: make([]string, len(cfg.Layers)),
		obs: cfg.Observer, clock: cfg.Clock}
	if c.clock == nil {
		c.clock = SystemClock
	}
	c.ctxObs, _ = cfg.Observer.(ContextObserver)
	for i, l := range cfg.Layers {
		if l == nil {
			return nil, fmt.Errorf("shed: Config.Layers[%d] is nil", i)
		}
		c.layers[i] = l
		c.names[i] = l.Name()
		if rr, ok := l.(RouteReader); !ok || rr.ReadsRoute() {
			c.readsRoute = true
		}
	}
	if cfg.Observer != nil {
		c.readsRoute = true
		lr, ok := cfg.Observer.(LatencyReader)
		c.timed = !ok || lr.ReadsLatency()
	}
	return c, nil
}

// Close closes every layer of the chain that is an io.Closer, the last
// layer first, and returns their errors joined: background sweepers,
// samplers and ticks stop, and a fleet layer leaves the fleet. Only the first call has an effect.
//
// Call it when the chain owns its layers, as one built for a single
// router does (shedhttp.Limit's). A layer shared by several chains, or
// carried over a configuration reload, is closed by whoever owns it
// instead, and that chain is simply dropped.
func (c *Chain) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for i := len(c.layers) - 1; i >= 0; i-- {
			if l, ok := c.layers[i].(io.Closer); ok {
				if err := l.Close(); err != nil {
					errs = append(errs, fmt.Errorf("shed: closing layer %s: %w", c.names[i], err))
				}
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// Layers returns the chain's layers, in order.
func (c *Chain) Layers() []Layer { return append([]Layer(nil), c.layers...) }

// Len returns how many layers the chain runs.
func (c *Chain) Len() int { return len(c.layers) }

// Grant holds the leases one admitted request took from the chain's layers.
// Its zero value holds nothing. Release it exactly once, when the work ends.
type Grant struct {
	chain   *Chain
	req     Request
	n       int
	granted time.Time // when the last lease was granted, for Released events
	leases  [MaxLayers]Lease
}

// Leases returns the leases held, in layer order.
func (g *Grant) Leases() []Lease { return g.leases[:g.n] }

// Request returns the request as the layers saw it (deadline and cost filled in).
func (g *Grant) Request() Request { return g.req }

// Release gives back every lease, the last layer's first. Only the first
// call has an effect.
func (g *Grant) Release(o Outcome) {
	var held time.Duration
	if c := g.chain; c != nil && c.timed && g.n > 0 {
		held = c.clock.Now().Sub(g.granted)
	}
	for i := g.n - 1; i >= 0; i-- {
		g.release(i, o, held)
	}
	g.n = 0
}

func (g *Grant) release(i int, o Outcome, held time.Duration) {
	l := &g.leases[i]
	if !l.Held() {
		return
	}
	l.Release(o)
	if c := g.chain; c != nil && c.obs != nil {
		c.obs.Observe(Event{Layer: c.names[i], Priority: g.req.Priority, Kind: Released, Outcome: o,
			Policy: l.Quota.Policy, Route: g.req.Route, Latency: held})
	}
}

// prepare fills in what the layers expect of a request, once per chain
// run: a cost of at least 1, the context's deadline when the request has
// none, and a resolved priority (the context's, WithPriority, when the
// request's is Unset; else Default), so that no layer sees Unset.
func prepare(ctx context.Context, req Request) Request {
	if req.Cost < 1 {
		req.Cost = 1
	}
	if req.Deadline.IsZero() {
		if d, ok := ctx.Deadline(); ok {
			req.Deadline = d
		}
	}
	if !req.Priority.Valid() {
		req.Priority = Default
		if p, ok := PriorityFrom(ctx); ok && p.Valid() {
			req.Priority = p
		}
	}
	return req
}

// Acquire runs req through every layer, filling g with their leases. On a
// rejection it releases what earlier layers granted (with Unused) and
// returns the layer's error (a *Rejection, with Layer and Priority filled
// in by the chain, or a context error when the caller went away while
// waiting); g then holds nothing.
func (c *Chain) Acquire(ctx context.Context, req Request, g *Grant) error {
	req = prepare(ctx, req)
	g.chain, g.req, g.n = c, req, 0
	// A layer that panics must not leak what the layers before it granted.
	returned := false
	defer func() {
		if !returned {
			g.Release(Unused)
		}
	}()
	// One clock read per layer boundary: a layer's end is the next's start.
	var start time.Time
	if c.timed {
		start = c.clock.Now()
	}
	for i, layer := range c.layers {
		lease, err := layer.Acquire(ctx, req)
		var end time.Time
		if c.timed {
			end = c.clock.Now()
		}
		if err != nil {
			returned = true
			rej := stamp(err, c.names[i], req.Priority)
			if c.obs != nil {
				c.observe(ctx, rejectedEvent(c.names[i], &req, rej, end.Sub(start)))
			}
			g.Release(Unused)
			return err
		}
		g.leases[i] = lease
		g.n = i + 1
		if c.obs != nil {
			g.granted = end
			c.observe(ctx, admittedEvent(c.names[i], &req, &g.leases[i], end.Sub(start)))
		}
		start = end
	}
	returned = true
	return nil
}

// stamp writes the layer's name and the request's priority into the
// rejection in err, so that layers need not carry them, and returns it
// (nil for an error that is no rejection: a caller gone while waiting).
func stamp(err error, layer string, p Priority) *Rejection {
	rej, ok := err.(*Rejection)
	if !ok {
		rej, ok = asRejection(err)
	}
	if !ok {
		return nil
	}
	rej.Layer, rej.Priority = layer, p
	return rej
}

// asRejection is errors.As for a wrapped rejection, apart so that the
// common, unwrapped case does not pay for its escaping target.
//
//go:noinline
func asRejection(err error) (*Rejection, bool) {
	var rej *Rejection
	ok := errors.As(err, &rej)
	return rej, ok
}

// Do runs fn if every layer admits req, and releases the leases when fn
// returns: Completed on success, Failed on an error, Dropped when ctx ended
// first. If fn panics, the leases are released (Failed) and the panic goes on.
// A rejection is returned as is; use errors.As to get the *Rejection.
func (c *Chain) Do(ctx context.Context, req Request, fn func(context.Context) error) error {
	// Pooled: a Grant on the stack would escape (its leases are released
	// through an interface), costing an allocation of ~1.3 KB per request.
	g := grantPool.Get().(*Grant)
	defer putGrant(g)
	if err := c.Acquire(ctx, req, g); err != nil {
		return err
	}
	returned := false
	defer func() {
		if !returned {
			g.Release(Failed)
		}
	}()
	err := fn(ctx)
	returned = true
	g.Release(OutcomeOf(ctx, err))
	return err
}

var grantPool = sync.Pool{New: func() any { return new(Grant) }}

// putGrant clears g, so that a pooled Grant keeps no layer's handles or the
// request's strings alive, and pools it.
func putGrant(g *Grant) {
	g.Reset()
	grantPool.Put(g)
}

// Reset clears g for reuse by another request, so that a pooled Grant keeps
// no layer's handles or the request's strings alive. Only the leases its
// chain can have written are cleared, not the whole Grant (over a
// kilobyte). Reset does not release: call Release first.
func (g *Grant) Reset() {
	n := MaxLayers
	if g.chain != nil {
		n = len(g.chain.layers)
	}
	clear(g.leases[:n])
	g.chain, g.req, g.n = nil, Request{}, 0
}

// OutcomeOf classifies how work ended: Dropped when ctx is done (the caller
// went away), Failed on an error, Completed otherwise.
func OutcomeOf(ctx context.Context, err error) Outcome {
	switch {
	case ctx.Err() != nil:
		return Dropped
	case err != nil:
		return Failed
	}
	return Completed
}
