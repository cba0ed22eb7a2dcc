package shed

import "context"

// ContextObserver is an Observer that also wants the request's context: a
// tracing adapter reaches the request's span through it. When the chain's
// Observer implements ContextObserver, the chain calls ObserveContext for
// every decision, with the context Acquire or Do was given. Releases have no
// context of their own (they may come after the caller has gone) and reach
// Observe.
type ContextObserver interface {
	Observer
	ObserveContext(ctx context.Context, e Event)
}

// ObserveContext passes the context on to every observer that wants it, and
// the event alone to the others.
func (os Observers) ObserveContext(ctx context.Context, e Event) {
	for _, o := range os {
		if co, ok := o.(ContextObserver); ok {
			co.ObserveContext(ctx, e)
		} else {
			o.Observe(e)
		}
	}
}

// observe reports a decision, with ctx when the observer wants it.
func (c *Chain) observe(ctx context.Context, e Event) {
	if c.ctxObs != nil {
		c.ctxObs.ObserveContext(ctx, e)
		return
	}
	c.obs.Observe(e)
}
