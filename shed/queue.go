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
