package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// Every bound context ends no later than the timeout after the call that
// asked for it got it, and no sooner than 15/16 of it after it asked.
func TestDeadlineSlotsBoundEveryCall(t *testing.T) {
	const timeout = 40 * time.Millisecond
	d := newDeadlineSlots(timeout)
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
		ctx := d.bound(parent)
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
	d := newDeadlineSlots(time.Hour)
	sooner, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	if ctx := d.bound(sooner); ctx != sooner {
		t.Error("a context ending before the timeout was wrapped")
	}
	gone, cancelGone := context.WithCancel(bg)
	cancelGone()
	if ctx := d.bound(gone); ctx != gone {
		t.Error("a cancelled context was wrapped")
	}
	live, cancelLive := context.WithCancel(bg)
	ctx := d.bound(live)
	cancelLive()
	if ctx.Err() != context.Canceled {
		t.Errorf("Err() = %v after the caller cancelled, want Canceled", ctx.Err())
	}
}

// Calls within one slot share its deadline; the next slot opens once the
// last is Timeout/16 old.
func TestDeadlineSlotsShareWithinWidth(t *testing.T) {
	d := newDeadlineSlots(time.Hour)
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
	d := newDeadlineSlots(time.Hour)
	d.slot(time.Now())
	if n := testing.AllocsPerRun(1000, func() { _ = d.bound(bg) }); n != 0 {
		t.Errorf("bound(Background): %v allocations, want 0", n)
	}
	live, cancel := context.WithCancel(bg)
	defer cancel()
	if n := testing.AllocsPerRun(1000, func() { _ = d.bound(live) }); n > 1 {
		t.Errorf("bound(cancellable): %v allocations, want at most 1", n)
	}
}

// A stalled Redis costs a caller with a cancellable context (as an HTTP
// request's is) no more than the timeout: the decision comes from the
// fallback.
func TestRedisTimeoutBoundsCancellableCaller(t *testing.T) {
	proxy := newStallProxy(t, redistest.Addr(t))
	redistest.Client(t)
	c := redis.NewClient(&redis.Options{Addr: proxy.addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	const timeout = 60 * time.Millisecond
	r, err := NewRedis(c, TokenBucket, PerHour(10), RedisConfig{Prefix: testPrefix(t),
		Clock: shedtest.NewClock(contractStart), Timeout: timeout, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if _, fb, err := r.Decide(ctx, "k", 1); err != nil || fb {
		t.Fatalf("healthy: fallback=%v err=%v", fb, err)
	}
	proxy.stall()
	start := time.Now()
	_, fb, err := r.Decide(ctx, "k", 1)
	withinTimeout(t, time.Since(start), timeout)
	if err != nil || !fb {
		t.Fatalf("stalled: fallback=%v err=%v; want the fallback", fb, err)
	}
}
