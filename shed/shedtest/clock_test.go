package shedtest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// The manual clock must be usable wherever a shed.Clock is.
var _ shed.Clock = (*shedtest.Clock)(nil)

// fired records the order in which timer callbacks ran.
type fired struct {
	mu    sync.Mutex
	names []string
}

func (f *fired) fn(name string) func() {
	return func() { f.mu.Lock(); f.names = append(f.names, name); f.mu.Unlock() }
}

func (f *fired) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.names...)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClockNowMovesOnlyWhenTold(t *testing.T) {
	c := shedtest.NewClock(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("Now = %v, want %v", c.Now(), t0)
	}
	c.Advance(1500 * time.Millisecond)
	if want := t0.Add(1500 * time.Millisecond); !c.Now().Equal(want) {
		t.Fatalf("after Advance: %v, want %v", c.Now(), want)
	}
	c.Set(t0.Add(time.Hour))
	if want := t0.Add(time.Hour); !c.Now().Equal(want) {
		t.Fatalf("after Set: %v, want %v", c.Now(), want)
	}
	c.Set(t0) // backwards: ignored
	if want := t0.Add(time.Hour); !c.Now().Equal(want) {
		t.Fatalf("Set moved the clock back to %v", c.Now())
	}
}

func TestClockTimersFireInOrder(t *testing.T) {
	c := shedtest.NewClock(t0)
	var f fired
	c.AfterFunc(30*time.Millisecond, f.fn("30a"))
	c.AfterFunc(10*time.Millisecond, f.fn("10"))
	c.AfterFunc(30*time.Millisecond, f.fn("30b")) // same instant: in the order set
	c.AfterFunc(20*time.Millisecond, f.fn("20"))
	c.AfterFunc(time.Second, f.fn("1s"))
	if c.Pending() != 5 {
		t.Fatalf("Pending = %d, want 5", c.Pending())
	}
	c.Advance(9 * time.Millisecond)
	if got := f.get(); len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	c.Advance(time.Millisecond) // exactly at 10ms: fires
	if got := f.get(); !equal(got, []string{"10"}) {
		t.Fatalf("fired %v, want [10]", got)
	}
	c.Advance(100 * time.Millisecond) // passes several: earliest first, all done on return
	if got := f.get(); !equal(got, []string{"10", "20", "30a", "30b"}) {
		t.Fatalf("fired %v", got)
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", c.Pending())
	}
	c.Set(t0.Add(time.Second))
	if got := f.get(); len(got) != 5 || got[4] != "1s" {
		t.Fatalf("Set did not fire the timer it passed: %v", got)
	}
	c.Advance(time.Hour)
	if got := f.get(); len(got) != 5 {
		t.Fatalf("a timer fired twice: %v", got)
	}
}

func TestClockZeroDurationFiresOnNextAdvance(t *testing.T) {
	c := shedtest.NewClock(t0)
	var f fired
	c.AfterFunc(0, f.fn("zero"))
	c.AfterFunc(-time.Second, f.fn("negative"))
	if got := f.get(); len(got) != 0 {
		t.Fatalf("fired before any Advance: %v", got)
	}
	c.Advance(0)
	if got := f.get(); !equal(got, []string{"negative", "zero"}) {
		t.Fatalf("fired %v, want [negative zero] (earliest first)", got)
	}
}

func TestClockStop(t *testing.T) {
	c := shedtest.NewClock(t0)
	var f fired
	a := c.AfterFunc(time.Second, f.fn("a"))
	b := c.AfterFunc(time.Second, f.fn("b"))
	if !a.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if a.Stop() {
		t.Fatal("second Stop reported true")
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", c.Pending())
	}
	c.Advance(time.Second)
	if got := f.get(); !equal(got, []string{"b"}) {
		t.Fatalf("fired %v, want [b]", got)
	}
	if b.Stop() {
		t.Fatal("Stop after the timer fired reported true")
	}
	if c.Pending() != 0 {
		t.Fatalf("Pending = %d, want 0", c.Pending())
	}
}

// TestClockCallbacksMayUseTheClock checks that callbacks run without the
// clock's lock held: they may read it, set timers and stop other timers.
// Stop's answer must agree with what happens: a timer whose Stop reported
// true never fires, one whose Stop reported false fires.
func TestClockCallbacksMayUseTheClock(t *testing.T) {
	c := shedtest.NewClock(t0)
	var f fired
	var seen time.Time
	var later shed.Timer
	var stopped bool
	c.AfterFunc(time.Second, func() {
		seen = c.Now()
		c.AfterFunc(0, f.fn("chained"))
		stopped = later.Stop()
	})
	later = c.AfterFunc(2*time.Second, f.fn("later"))
	c.Advance(5 * time.Second)
	if seen.Before(t0.Add(time.Second)) || seen.After(t0.Add(5*time.Second)) {
		t.Fatalf("callback saw %v, outside [1s, 5s]", seen.Sub(t0))
	}
	c.Advance(0) // whatever a callback set for "now" has fired by now
	got := f.get()
	var chained, fired2 bool
	for _, n := range got {
		chained = chained || n == "chained"
		fired2 = fired2 || n == "later"
	}
	if !chained {
		t.Fatalf("fired %v: the timer set by a callback did not fire", got)
	}
	if stopped == fired2 {
		t.Fatalf("Stop reported %v but the timer fired: %v", stopped, fired2)
	}
	if c.Pending() != 0 {
		t.Fatalf("Pending = %d", c.Pending())
	}
}

func TestClockConcurrent(t *testing.T) {
	c := shedtest.NewClock(t0)
	var n sync.WaitGroup
	var mu sync.Mutex
	count, stops := 0, 0
	for i := 0; i < 4; i++ {
		n.Add(1)
		go func() {
			defer n.Done()
			for j := 0; j < 100; j++ {
				tm := c.AfterFunc(time.Duration(j)*time.Millisecond, func() { mu.Lock(); count++; mu.Unlock() })
				if j%2 == 0 && tm.Stop() {
					mu.Lock()
					stops++
					mu.Unlock()
				}
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	n.Wait()
	c.Advance(time.Hour)
	if c.Pending() != 0 || count+stops != 400 || stops == 0 {
		t.Fatalf("Pending %d, fired %d, stopped %d; want 0 pending and every timer either fired or stopped",
			c.Pending(), count, stops)
	}
}
