// Package shedtest holds what tests of code built on shed need: a manual
// clock, layers that admit or reject on demand, and RunLayerSuite, the
// conformance suite every shed.Layer should pass (run it from your own
// layer's tests):
//
//	func TestMyLayerConforms(t *testing.T) {
//		shedtest.RunLayerSuite(t, shedtest.LayerSuite{
//			New: func(t testing.TB, clock *shedtest.Clock) shed.Layer {
//				return newMyLayer(3, clock) // admits 3 at once, times by clock
//			},
//			Capacity: 3,
//			Status:   shed.StatusServiceUnavailable,
//		})
//	}
//
// A test that needs time to pass moves a Clock (NewClock, Advance) instead
// of sleeping; a Layer (NewLayer) admits, or rejects with what Reject was
// given, and counts what it granted and what was released.
package shedtest

import (
	"sort"
	"sync"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// Clock is a manual shed.Clock: time moves only when Advance or Set says so,
// and timers fire, in order, as it passes them. Safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	seq    int
}

type timer struct {
	c    *Clock
	at   time.Time
	seq  int
	f    func()
	done bool
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run, in its own goroutine as time.AfterFunc
// does, once the clock has been advanced by d. A d of zero or less fires on
// the next Advance (of any amount, even zero).
func (c *Clock) AfterFunc(d time.Duration, f func()) shed.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	return true
}

// Pending is how many timers have not fired or been stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// Advance moves the clock forward by d and fires the timers it passes,
// earliest first. It waits for the fired callbacks to return, so a test sees
// their effects when Advance returns.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*timer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(now):
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if !due[i].at.Equal(due[j].at) {
			return due[i].at.Before(due[j].at)
		}
		return due[i].seq < due[j].seq
	})
	var wg sync.WaitGroup
	for _, t := range due {
		// Marked done only now, so that an earlier callback of this same
		// Advance can still stop it.
		c.mu.Lock()
		stopped := t.done
		t.done = true
		c.mu.Unlock()
		if stopped {
			continue
		}
		wg.Add(1)
		go func(f func()) { defer wg.Done(); f() }(t.f)
		wg.Wait() // one at a time, in order, each on its own goroutine
	}
}

// Set moves the clock to t (forward only) and fires the timers it passes.
func (c *Clock) Set(t time.Time) {
	d := t.Sub(c.Now())
	if d < 0 {
		d = 0
	}
	c.Advance(d)
}
