package layerkit

import (
	"sync"
	"sync/atomic"

	"github.com/loadshed/loadshed/shed"
)

// Guard is the per-grant record of a layer whose release changes counters:
// it makes a grant count once, whichever copy of its shed.Lease is released, and
// however often. A shed.Lease is a value, so a caller can copy one and release
// both copies; shed.Lease.Release clears only the copy it is called on.
//
// Layer authors do not build Guards: a GuardPool issues them into a lease
// (shed.Lease.Ref holds the guard, shed.Lease.ID its generation) and claims them back
// when the lease is released. Only the first claim of a generation succeeds
// (a compare-and-swap); the guard then goes back to the pool, and its next
// generation is one no old copy holds, so a late copy is a no-op even after
// the guard was reused.
type Guard[T any] struct {
	gen   atomic.Uint64 // moves on at each claim
	pool  *GuardPool[T]
	value T
}

// GuardPool recycles one layer's Guards, so that granting allocates
// nothing. Its zero value is ready to use. It is safe for concurrent use.
//
//	var guards layerkit.GuardPool[*slot]
//
//	// Acquire:
//	lease := shed.NewLease(l)
//	guards.Issue(&lease, s)
//
//	// Release:
//	s, ok := guards.Claim(lease)
//	if !ok {
//		return // not this layer's, or released already through a copy
//	}
//	s.n.Add(-lease.Cost)
type GuardPool[T any] struct {
	pool sync.Pool
}

// Issue arms a guard holding v for a new grant and records it in lease
// (Ref and ID). Every lease Issue armed must be claimed once, or its guard
// is left to the garbage collector instead of the pool.
func (p *GuardPool[T]) Issue(lease *shed.Lease, v T) {
	g, _ := p.pool.Get().(*Guard[T])
	if g == nil {
		g = &Guard[T]{pool: p}
	}
	g.value = v
	// A plain load: the guard is this grant's alone until claimed, and the
	// claim moves gen on, so no copy of an earlier lease matches it.
	lease.ID = g.gen.Load()
	lease.Ref = g
}

// Claim returns the value Issue recorded in lease and true the first time
// any copy of lease is claimed; false (and the zero value) afterwards, and
// for a lease this pool did not issue.
func (p *GuardPool[T]) Claim(lease *shed.Lease) (T, bool) {
	var zero T
	g, ok := lease.Ref.(*Guard[T])
	if !ok || g.pool != p || !g.gen.CompareAndSwap(lease.ID, lease.ID+1) {
		return zero, false
	}
	v := g.value
	g.value = zero
	p.pool.Put(g)
	return v, true
}
