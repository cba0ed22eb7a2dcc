// Package instantclock is a shed.Clock for the tests of shedclient's
// packages: its timers fire at once, time jumping by their delay, and it
// records every delay asked for, so that a test sees how long the client
// would have waited without waiting.
package instantclock

import (
	"sync"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// Clock is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	waited []time.Duration
}

// New returns a Clock at the present time.
func New() *Clock { return &Clock{now: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc moves the clock by d, records d and calls f.
func (c *Clock) AfterFunc(d time.Duration, f func()) shed.Timer {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.waited = append(c.waited, d)
	c.mu.Unlock()
	f()
	return stopped{}
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Waits returns the delays asked for, in order.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waited...)
}

type stopped struct{}

func (stopped) Stop() bool { return false }
