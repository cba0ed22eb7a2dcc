package redisx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Deadlines bound each round trip by a layer's timeout without a
// context.WithTimeout per call, which cost four allocations (the context,
// its timer, its Done channel) and a timer set and stopped: about half the
// bytes a decision allocated.
//
// go-redis with ContextTimeoutEnabled reads ctx.Deadline() for the
// connection's read and write deadlines, so the round trip itself needs no
// timer; only the waits (for a pooled connection, a dial, a retry's
// backoff) select on ctx.Done(). Calls that start within the same slot,
// 1/16 of the timeout, share one deadline and one Done channel, closed by
// one timer when it passes. Each call thus gets between 15/16 of the
// timeout and the whole of it, never more.
type Deadlines struct {
	timeout time.Duration
	width   time.Duration

	cur atomic.Pointer[deadlineSlot]
	mu  sync.Mutex // held while a new slot is made
}

// deadlineSlot is one shared deadline.
type deadlineSlot struct {
	start    time.Time // when the slot opened (monotonic)
	deadline time.Time // start + timeout
	done     chan struct{}
	bg       slotCtx // context.Background() under this deadline
}

// NewDeadlines returns deadlines of timeout (at least 1ns).
func NewDeadlines(timeout time.Duration) *Deadlines {
	return &Deadlines{timeout: timeout, width: max(timeout/16, 1)}
}

// slot returns the slot open at now, opening a new one when the last is
// older than its width.
func (d *Deadlines) slot(now time.Time) *deadlineSlot {
	if s := d.cur.Load(); s != nil && now.Sub(s.start) < d.width {
		return s
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.cur.Load(); s != nil && now.Sub(s.start) < d.width {
		return s
	}
	// The slot opens at the time read under the lock, so that its deadline
	// is never later than the timeout after any call that uses it.
	start := time.Now()
	s := &deadlineSlot{start: start, deadline: start.Add(d.timeout), done: make(chan struct{})}
	s.bg = slotCtx{Context: context.Background(), slot: s}
	time.AfterFunc(d.timeout, func() { close(s.done) })
	d.cur.Store(s)
	return s
}

// Bound returns ctx under the's timeout: ctx itself when it is due
// to end no later than the slot's deadline or has ended already, else a
// slotCtx over it (no allocation for context.Background(), one small one
// otherwise, never a timer).
func (d *Deadlines) Bound(ctx context.Context) context.Context {
	s := d.slot(time.Now())
	if dl, ok := ctx.Deadline(); ok && !dl.After(s.deadline) {
		return ctx
	}
	if ctx == context.Background() {
		return &s.bg
	}
	if ctx.Done() != nil && ctx.Err() != nil {
		return ctx
	}
	return &slotCtx{Context: ctx, slot: s}
}

// slotCtx is a caller's context under a slot's deadline, which is sooner
// than the caller's own: it keeps the caller's values (for go-redis hooks:
// tracing, logging) and reports the caller's cancellation through Err, but
// its Done is the slot's. A caller cancelling during a call thus ends the
// call's waits (for a pooled connection, a dial, a retry's backoff) at the
// slot's deadline rather than at once; go-redis never interrupts a read
// or write on cancellation either, only on the deadline, and a caller
// cancelled before the call starts gets its own context.
type slotCtx struct {
	context.Context
	slot *deadlineSlot
}

func (c *slotCtx) Deadline() (time.Time, bool) { return c.slot.deadline, true }

func (c *slotCtx) Done() <-chan struct{} { return c.slot.done }

func (c *slotCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	select {
	case <-c.slot.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
