package shed

import (
	"context"
	"time"
)

// Layer answers one question for one request: may it go on? Acquire returns
// a Lease when it may, and an error (a *Rejection when the layer said no, a
// context error when the caller went away while it waited) when it may not.
//
// Acquire must be safe for concurrent use and must not block past the
// request's deadline or the layer's own bound.
type Layer interface {
	// Name identifies the layer in rejections, metrics and logs.
	Name() string
	Acquire(ctx context.Context, req Request) (Lease, error)
}

// Releaser gives back what a lease holds. Layers implement it; callers use
// Lease.Release instead.
type Releaser interface {
	Release(lease *Lease, outcome Outcome)
}

// Outcome says how the work behind a lease ended. Adaptive layers learn only
// from Completed and Failed: a Dropped or Unused lease says nothing about
// the service.
type Outcome uint8

const (
	// Completed: the work finished normally.
	Completed Outcome = iota
	// Failed: the work finished with an error, or panicked.
	Failed
	// Dropped: the caller went away (cancelled or timed out) before the work
	// finished.
	Dropped
	// Unused: the work never ran because a later layer rejected the request.
	// A layer may give back what the lease took (a rate token, say).
	Unused
)

func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Dropped:
		return "dropped"
	case Unused:
		return "unused"
	}
	return "outcome(?)"
}

// Lease is what a layer granted. It is a value, so that granting one costs
// no allocation; the layer keeps what it needs to release it in Ref and ID
// (Ref holds a pointer, never a value that would need boxing).
//
// Release gives it back exactly once: a second Release of the same Lease
// does nothing. Copies of a lease are independent, so release the one you
// were given, not a copy.
type Lease struct {
	releaser Releaser

	// Ref and ID are the granting layer's handle on what the lease holds.
	Ref any
	ID  uint64
	// Cost is the units the lease holds.
	Cost int64
	// Acquired is when the layer granted the lease, for layers that measure
	// latency; zero when the layer does not need it.
	Acquired time.Time

	// Quota describes the limit that admitted the request, for the
	// RateLimit response headers; zero when the layer has none to tell.
	Quota Quota
	// Waited is how long the request waited in a queue before it was granted.
	Waited time.Duration
	// Over is set when the request was admitted above its limit, by a soft
	// or elastic allowance.
	Over bool
	// DryRun is set when the layer would have rejected the request but is
	// in dry-run mode.
	DryRun bool
	// Fallback is set when the layer decided from a local estimate because
	// its shared store (Redis) did not answer in time.
	Fallback bool
	// MoreQuotas is set by a layer whose lease stands for several limits
	// at once (a rate-limit layer with several rules): its Releaser is a
	// QuotaLister, and Quota is only the one nearest to running out.
	MoreQuotas bool
}

// QuotaLister is implemented by a Releaser whose leases can stand for
// several limits (see Lease.MoreQuotas). Quotas appends to dst every quota
// lease was admitted under, in the layer's order, Lease.Quota among them.
type QuotaLister interface {
	Quotas(lease *Lease, dst []Quota) []Quota
}

// Quotas appends to dst every quota the lease was admitted under: what its
// layer lists when MoreQuotas is set (while the lease is held), else Quota
// when it is not zero. The RateLimit-Policy field lists them all, so that
// every response of a route names the same policies.
func (l *Lease) Quotas(dst []Quota) []Quota {
	if l.MoreQuotas {
		if ql, ok := l.releaser.(QuotaLister); ok {
			return ql.Quotas(l, dst)
		}
	}
	if !l.Quota.IsZero() {
		dst = append(dst, l.Quota)
	}
	return dst
}

// NewLease returns a lease that r will release.
func NewLease(r Releaser) Lease { return Lease{releaser: r} }

// Held reports whether the lease still has something to release.
func (l *Lease) Held() bool { return l.releaser != nil }

// Release gives the lease back with the outcome of the work. Only the first
// call on a lease has an effect.
func (l *Lease) Release(o Outcome) {
	r := l.releaser
	if r == nil {
		return
	}
	l.releaser = nil
	r.Release(l, o)
}

// Quota is one limit as the RateLimit headers describe it
// (draft-ietf-httpapi-ratelimit-headers): a named policy of Limit units per
// Window, with Remaining units left and Reset until they are all back.
type Quota struct {
	// Policy names the limit ("per-key", "per-route", "in-flight").
	Policy string
	// Limit is the quota: how many units the policy allows per Window.
	Limit int64
	// Window is the policy's time window; zero for limits on requests in
	// flight, which have none.
	Window time.Duration
	// Remaining is how many units are left now.
	Remaining int64
	// Reset is how long until more units are made available (the
	// RateLimit field's t, draft-ietf-httpapi-ratelimit-headers-10): for a
	// bucket, until its next unit; for a window, until units of it expire;
	// zero when none are taken or the layer cannot tell.
	Reset time.Duration
	// Service is set when the limit protects the service's own capacity
	// (an overall or per-route in-flight limit, the fleet's or the worker's)
	// rather than being the client's quota. HTTP front ends do not disclose
	// such limits to clients unless told to (the draft's security
	// considerations).
	Service bool
	// DryRun is set on every quota of a layer in dry run
	// (Enforcement.DryRun): the limit is decided and recorded, but
	// enforced on nobody. HTTP front ends keep such quotas out of every
	// field clients see, on admitted and on rejected requests, unless told
	// to for testing (shedhttp.Config.ShowDryRun): a client that honours
	// the fields would otherwise slow down to a limit nobody enforces.
	DryRun bool
}

// IsZero reports whether q says nothing.
func (q Quota) IsZero() bool { return q.Policy == "" && q.Limit == 0 }
