package shed

import (
	"context"
	"time"
)

// Request is what every layer decides on: who is asking, for what, how
// important it is and how much it costs. It is passed by value so that no
// layer can change what the next one sees.
type Request struct {
	// Key says who is asking: an API key, a user, a client IP, or a
	// combination. Per-key limits are kept per distinct Key.
	Key string
	// Route is the route pattern ("POST /v1/charges"), not the raw path, so
	// that per-route limits stay bounded in number.
	Route string
	// Priority says how important the request is; lower is shed first.
	Priority Priority
	// Cost is how many units the request takes (default 1; a GraphQL query
	// may cost more). Values below 1 count as 1.
	Cost int64
	// Deadline is when the caller stops waiting; zero means none. The chain
	// fills it from the context when it is zero.
	Deadline time.Time
}

// Units returns the request's cost, at least 1.
func (r Request) Units() int64 {
	if r.Cost < 1 {
		return 1
	}
	return r.Cost
}

type priorityKey struct{}

// WithPriority returns a context that carries p. The HTTP middleware and Do
// read it when the request itself does not say.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityFrom returns the priority carried by ctx and whether there was one.
func PriorityFrom(ctx context.Context) (Priority, bool) {
	p, ok := ctx.Value(priorityKey{}).(Priority)
	return p, ok
}
