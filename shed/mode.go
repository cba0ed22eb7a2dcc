package shed

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Mode says how strictly a layer holds its limit.
type Mode uint8

const (
	// Hard: never above the limit.
	Hard Mode = iota
	// Soft: may exceed the limit by a bounded overage (Enforcement.Overage)
	// for a bounded time (Enforcement.OverageFor); requests admitted over the
	// limit are marked (Lease.Over).
	Soft
	// Elastic: may exceed the limit by the overage while the process has
	// headroom (Enforcement.Headroom), and snaps back when it has not.
	Elastic
)

func (m Mode) String() string {
	switch m {
	case Hard:
		return "hard"
	case Soft:
		return "soft"
	case Elastic:
		return "elastic"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses "hard", "soft" or "elastic".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "hard":
		return Hard, nil
	case "soft":
		return Soft, nil
	case "elastic":
		return Elastic, nil
	}
	return Hard, fmt.Errorf("shed: unknown mode %q (valid: hard, soft, elastic)", s)
}

// Action says what a layer does with a request over its limit.
type Action uint8

const (
	// Reject answers at once: 429 for per-client limits, 503 for capacity.
	Reject Action = iota
	// Queue waits for capacity, within the queue's bounds and the request's
	// deadline, highest priority first.
	Queue
)

func (a Action) String() string {
	switch a {
	case Reject:
		return "reject"
	case Queue:
		return "queue"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Headroom is the signal elastic limits read: the fraction of this process's
// capacity that is spare, from 0 (saturated) to 1 (idle). The worker layer
// provides the real one; HeadroomFunc adapts a function.
type Headroom interface {
	Headroom() float64
}

// HeadroomFunc adapts a function to Headroom.
type HeadroomFunc func() float64

// Headroom calls f.
func (f HeadroomFunc) Headroom() float64 { return f() }

// Enforcement is how a layer enforces its limit: the mode, dry run and the
// action on "over". The zero value is hard, enforcing, rejecting.
type Enforcement struct {
	// Mode is Hard (default), Soft or Elastic.
	Mode Mode
	// DryRun decides and records but never rejects: a request that would be
	// rejected is admitted with Lease.DryRun set. Such a request takes none
	// of the layer's capacity (a rejection would not have), so the layer
	// goes on deciding as it would if it enforced. New limits ship in dry
	// run.
	DryRun bool
	// Action is Reject (default) or Queue.
	Action Action
	// Overage is how far Soft and Elastic may go above the limit, as a
	// fraction of it (default 0.1: 10% more; at least one unit; at most
	// MaxOverage).
	Overage float64
	// OverageFor is the longest a Soft overage episode lasts (default 30s).
	// An episode begins with the first request over the limit; past
	// OverageFor the hard limit holds.
	OverageFor time.Duration
	// OverageCooldown is how long a Soft limit must go without being
	// exceeded before a new episode may begin (default OverageFor); and a
	// new episode begins only more than OverageFor + OverageCooldown after
	// the previous one began. Under sustained overload, requests over the
	// limit keep arriving, so there is one episode and then the hard limit,
	// until the load has stayed within the limit for the cool-down. See
	// Episode.
	OverageCooldown time.Duration
	// Headroom is Elastic's signal; required in Elastic mode. Elastic has
	// no time limit: it allows the overage for as long as the signal says
	// there is room.
	Headroom Headroom
	// MinHeadroom is the least headroom at which Elastic still allows the
	// overage, in [0, 1]; nil means DefaultMinHeadroom (0.2). A pointer so
	// that 0 (allow the overage whatever the signal says) can be set:
	// MinHeadroom: new(0.0).
	MinHeadroom *float64
	// Queue bounds the wait when Action is Queue.
	Queue QueueConfig
}

// Defaults used by Enforcement when a field is zero, and the bound on
// Overage.
const (
	DefaultOverage     = 0.1
	DefaultOverageFor  = 30 * time.Second
	DefaultMinHeadroom = 0.2
	// MaxOverage is the largest Overage Validate accepts: ten times the
	// limit more. An overage beyond it is no longer a limit.
	MaxOverage = 10.0
)

// Validate reports every invalid field, by name (joined with errors.Join).
func (e Enforcement) Validate() error {
	var errs []error
	if e.Mode > Elastic {
		errs = append(errs, fmt.Errorf("shed: Enforcement.Mode: unknown mode %d", e.Mode))
	}
	if e.Action > Queue {
		errs = append(errs, fmt.Errorf("shed: Enforcement.Action: unknown action %d", e.Action))
	}
	if !(e.Overage >= 0 && e.Overage <= MaxOverage) { // NaN fails both
		errs = append(errs, fmt.Errorf("shed: Enforcement.Overage must be a fraction within [0, %v], got %v", MaxOverage, e.Overage))
	}
	if e.OverageFor < 0 {
		errs = append(errs, fmt.Errorf("shed: Enforcement.OverageFor must not be negative, got %v", e.OverageFor))
	}
	if e.OverageCooldown < 0 {
		errs = append(errs, fmt.Errorf("shed: Enforcement.OverageCooldown must not be negative, got %v", e.OverageCooldown))
	}
	if m := e.MinHeadroom; m != nil && !(*m >= 0 && *m <= 1) {
		errs = append(errs, fmt.Errorf("shed: Enforcement.MinHeadroom must be within [0, 1], got %v", *m))
	}
	if e.Mode == Elastic && e.Headroom == nil {
		errs = append(errs, errors.New("shed: Enforcement.Headroom is required in elastic mode"))
	}
	if e.Action == Queue {
		if err := e.Queue.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ceiling is the most a Soft or Elastic layer may ever admit for a limit:
// the limit plus its overage, at least one unit more. For Hard it is limit.
func (e *Enforcement) Ceiling(limit int64) int64 {
	if e.Mode == Hard {
		return limit
	}
	o := e.Overage
	if o == 0 {
		o = DefaultOverage
	}
	f := math.Ceil(float64(limit) * o)
	if f >= math.MaxInt64 { // an Overage Validate refuses; never wrap around
		return math.MaxInt64
	}
	extra := int64(f)
	if extra < 1 {
		extra = 1
	}
	if limit > math.MaxInt64-extra {
		return math.MaxInt64
	}
	return limit + extra
}
