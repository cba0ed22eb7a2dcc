package shed

import (
	"errors"
	"fmt"
	"time"
)

// QueueConfig bounds a wait queue.
type QueueConfig struct {
	// MaxLength is the most requests that may wait at once. Required, ≥ 1.
	MaxLength int
	// MaxWait is the longest a request waits. Required, > 0. A request's own
	// deadline, when sooner, wins.
	MaxWait time.Duration
	// Clock drives MaxWait (default SystemClock).
	Clock Clock
	// AdaptiveLIFO serves the newest waiter first, within a priority, while
	// the queue has been non-empty for longer than MaxWait/2 (default off:
	// always FIFO within a priority). Under sustained overload the oldest
	// waiters are the likeliest to time out, or to have been abandoned by
	// their clients already, before their work finishes; serving the newest
	// keeps the latency of admitted work low while the backlog drains by
	// timeouts. While it is in force a full queue refuses its oldest waiter
	// of the newcomer's priority, the one it would serve last, rather than
	// the newcomer. The queue goes back to FIFO as soon as it empties. This
	// is the "adaptive LIFO" Facebook describes in "Fail at Scale" (ACM
	// Queue, 2015).
	AdaptiveLIFO bool
}

// Validate reports invalid fields by name.
func (c QueueConfig) Validate() error {
	var errs []error
	if c.MaxLength < 1 {
		errs = append(errs, fmt.Errorf("shed: QueueConfig.MaxLength must be at least 1, got %d", c.MaxLength))
	}
	if c.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("shed: QueueConfig.MaxWait must be positive, got %v", c.MaxWait))
	}
	return errors.Join(errs...)
}
