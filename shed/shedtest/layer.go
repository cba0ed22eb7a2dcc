package shedtest

import (
	"context"
	"sync/atomic"

	"github.com/loadshed/loadshed/shed"
)

// Layer is a shed.Layer that admits or rejects on demand and counts what
// happened to it, for tests of chains, middleware and observers. It admits
// until told otherwise. Its methods are safe for concurrent use and
// allocation-free while it admits.
//
// Set Quota, OnAcquire and OnRelease before the layer is used; they are
// read without synchronisation.
type Layer struct {
	name   string
	reject atomic.Pointer[error]

	// Quota is put on every lease the layer grants (Lease.Quota), for tests
	// of the RateLimit headers.
	Quota shed.Quota
	// OnAcquire, when set, is called at the start of every Acquire, before
	// the layer decides: tests record the order layers ran in, or the
	// request they saw.
	OnAcquire func(ctx context.Context, req shed.Request)
	// OnRelease, when set, is called for every lease released, after the
	// counters are updated.
	OnRelease func(lease *shed.Lease, o shed.Outcome)

	acquired atomic.Int64
	rejected atomic.Int64
	released [4]atomic.Int64 // by shed.Outcome
	ids      atomic.Uint64
}

// NewLayer returns a layer called name that admits everything.
func NewLayer(name string) *Layer { return &Layer{name: name} }

// Name returns the layer's name.
func (l *Layer) Name() string { return l.name }

// Admit makes the layer admit every request from now on.
func (l *Layer) Admit() { l.reject.Store(nil) }

// Reject makes the layer answer every request from now on with err, or
// admit again when err is nil. err is typically a *shed.Rejection (see
// shed.Throttled and shed.Shed), but any error will do.
func (l *Layer) Reject(err error) {
	if err == nil {
		l.Admit()
		return
	}
	l.reject.Store(&err)
}

// Acquire grants a lease of req's cost, or returns the error set by Reject.
func (l *Layer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	if l.OnAcquire != nil {
		l.OnAcquire(ctx, req)
	}
	if p := l.reject.Load(); p != nil {
		l.rejected.Add(1)
		// A chain writes the layer's name and the priority into the
		// rejection it gets: give each call its own.
		if rej, ok := (*p).(*shed.Rejection); ok {
			c := *rej
			if c.Layer == "" {
				c.Layer = l.name
			}
			return shed.Lease{}, &c
		}
		return shed.Lease{}, *p
	}
	l.acquired.Add(1)
	lease := shed.NewLease(l)
	lease.ID = l.ids.Add(1)
	lease.Cost = req.Units()
	lease.Quota = l.Quota
	return lease, nil
}

// Release implements shed.Releaser.
func (l *Layer) Release(lease *shed.Lease, o shed.Outcome) {
	if int(o) < len(l.released) {
		l.released[o].Add(1)
	}
	if l.OnRelease != nil {
		l.OnRelease(lease, o)
	}
}

// Acquired returns how many leases the layer granted.
func (l *Layer) Acquired() int64 { return l.acquired.Load() }

// Rejected returns how many requests the layer rejected.
func (l *Layer) Rejected() int64 { return l.rejected.Load() }

// Released returns how many leases were released with outcome o.
func (l *Layer) Released(o shed.Outcome) int64 {
	if int(o) >= len(l.released) {
		return 0
	}
	return l.released[o].Load()
}

// ReleasedTotal returns how many leases were released, whatever the outcome.
func (l *Layer) ReleasedTotal() int64 {
	var n int64
	for i := range l.released {
		n += l.released[i].Load()
	}
	return n
}

// Held returns how many granted leases have not been released yet.
func (l *Layer) Held() int64 { return l.Acquired() - l.ReleasedTotal() }
