package redisx

import (
	"context"
	"testing"
	"time"
)

var bg = context.Background()

// Every bound context ends no later than the timeout after the call that
// asked for it got it, and no sooner than 15/16 of it after it asked.
func TestDeadlineSlotsBoundEveryCall(t *testing.T) {
	const timeout = 40 * time.Millisecond
	d := NewDeadlines(timeout)
	type ctxKey struct{}
	values := context.WithValue(bg, ctxKey{}, "v")
	cancellable, cancel := context.WithCancel(values)
	defer cancel()
	later, cancelLater := context.WithTimeout(values, time.Hour)
	defer cancelLater()
	for name, parent := range map[string]context.Context{
		"background": bg, "values": values, "cancellable": cancellable, "later deadline": later,
	} {
		before := time.Now()
		ctx := d.Bound(parent)
		after := time.Now()
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatalf("%s: no deadline", name)
		}
		if dl.After(after.Add(timeout)) || dl.Before(before.Add(timeout-timeout/16)) {
			t.Errorf("%s: deadline %v after the call, want within [15/16, 1] × %v", name, dl.Sub(before), timeout)
		}
		if ctx.Err() != nil {
			t.Errorf("%s: Err() = %v before the deadline", name, ctx.Err())
		}
		if parent != bg && ctx.Value(ctxKey{}) != "v" {
			t.Errorf("%s: the caller's values are lost", name)
		}
		select {
		case <-ctx.Done():
			if now := time.Now(); now.Before(dl) {
				t.Errorf("%s: Done %v before the deadline", name, dl.Sub(now))
			}
			if ctx.Err() != context.DeadlineExceeded {
				t.Errorf("%s: Err() = %v after the deadline, want DeadlineExceeded", name, ctx.Err())
			}
		case <-time.After(timeout + 5*time.Second):
			t.Fatalf("%s: Done never closed", name)
		}
	}
}

// A caller's context due to end sooner, or ended already, is used as it
// is; one cancelled while bound reports its cancellation.
func TestDeadlineSlotsCallerContext(t *testing.T) {
	d := NewDeadlines(time.Hour)
	sooner, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	if ctx := d.Bound(sooner); ctx != sooner {
		t.Error("a context ending before the timeout was wrapped")
	}
	gone, cancelGone := context.WithCancel(bg)
	cancelGone()
	if ctx := d.Bound(gone); ctx != gone {
		t.Error("a cancelled context was wrapped")
	}
	live, cancelLive := context.WithCancel(bg)
	ctx := d.Bound(live)
	cancelLive()
	if ctx.Err() != context.Canceled {
		t.Errorf("Err() = %v after the caller cancelled, want Canceled", ctx.Err())
	}
}

// Calls within one slot share its deadline; the next slot opens once the
// last is Timeout/16 old.
func TestDeadlineSlotsShareWithinWidth(t *testing.T) {
	d := NewDeadlines(time.Hour)
	s := d.slot(time.Now())
	if d.slot(s.start.Add(d.width-1)) != s {
		t.Error("a call within the slot's width got another slot")
	}
	if next := d.slot(s.start.Add(d.width)); next == s || next.deadline.Before(s.deadline) {
		t.Errorf("a call past the slot's width got %p (deadline %v), want a new, later slot than %p (%v)",
			next, next.deadline, s, s.deadline)
	}
}

// Bounding a call allocates nothing for context.Background() and one small
// object for any other caller's context: no timer, no channel.
func TestDeadlineSlotsAllocations(t *testing.T) {
	d := NewDeadlines(time.Hour)
	d.slot(time.Now())
	if n := testing.AllocsPerRun(1000, func() { _ = d.Bound(bg) }); n != 0 {
		t.Errorf("bound(Background): %v allocations, want 0", n)
	}
	live, cancel := context.WithCancel(bg)
	defer cancel()
	if n := testing.AllocsPerRun(1000, func() { _ = d.Bound(live) }); n > 1 {
		t.Errorf("bound(cancellable): %v allocations, want at most 1", n)
	}
}
