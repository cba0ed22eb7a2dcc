package shed

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
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
	// rejected is admitted with Lease.DryRun set. New limits ship in dry run.
	DryRun bool
	// Action is Reject (default) or Queue.
	Action Action
	// Overage is how far Soft and Elastic may go above the limit, as a
	// fraction of it (default 0.1: 10% more; at least one unit).
	Overage float64
	// OverageFor is the longest a Soft overage may last before the hard limit
	// applies again, until the layer is back under its limit (default 30s).
	OverageFor time.Duration
	// Headroom is Elastic's signal; required in Elastic mode.
	Headroom Headroom
	// MinHeadroom is the least headroom at which Elastic still allows the
	// overage (default 0.2).
	MinHeadroom float64
	// Queue bounds the wait when Action is Queue.
	Queue QueueConfig
}

// Defaults used by Enforcement when a field is zero.
const (
	DefaultOverage     = 0.1
	DefaultOverageFor  = 30 * time.Second
	DefaultMinHeadroom = 0.2
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
	if e.Overage < 0 || math.IsNaN(e.Overage) || math.IsInf(e.Overage, 0) {
		errs = append(errs, fmt.Errorf("shed: Enforcement.Overage must be a non-negative fraction, got %v", e.Overage))
	}
	if e.OverageFor < 0 {
		errs = append(errs, fmt.Errorf("shed: Enforcement.OverageFor must not be negative, got %v", e.OverageFor))
	}
	if e.MinHeadroom < 0 || e.MinHeadroom > 1 || math.IsNaN(e.MinHeadroom) {
		errs = append(errs, fmt.Errorf("shed: Enforcement.MinHeadroom must be within [0, 1], got %v", e.MinHeadroom))
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
	extra := int64(math.Ceil(float64(limit) * o))
	if extra < 1 {
		extra = 1
	}
	if limit > math.MaxInt64-extra {
		return math.MaxInt64
	}
	return limit + extra
}

// Verdict is what a layer should do with one request, given where it stands
// against its limit.
type Verdict uint8

const (
	// Admit: within the limit.
	Admit Verdict = iota
	// AdmitOver: above the limit, within the soft or elastic allowance.
	AdmitOver
	// AdmitDryRun: would be rejected, but the layer is in dry run.
	AdmitDryRun
	// Wait: over; queue for capacity.
	Wait
	// Deny: over; reject.
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Admit:
		return "admit"
	case AdmitOver:
		return "admit-over"
	case AdmitDryRun:
		return "admit-dry-run"
	case Wait:
		return "wait"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Decide turns "within the limit" and "within the ceiling" into a verdict,
// applying mode, dry run and action in one place for every layer. soft tracks
// the current overage episode for Soft mode; it may be nil for other modes.
func (e *Enforcement) Decide(now time.Time, withinLimit, withinCeiling bool, soft *Episode) Verdict {
	if withinLimit {
		if soft != nil {
			soft.End()
		}
		return Admit
	}
	if withinCeiling {
		switch e.Mode {
		case Soft:
			if soft != nil && soft.Continue(now, e.overageFor()) {
				return AdmitOver
			}
		case Elastic:
			if e.Headroom != nil && e.Headroom.Headroom() >= e.minHeadroom() {
				return AdmitOver
			}
		}
	}
	if e.DryRun {
		// Dry run never delays either: it only records what would happen.
		return AdmitDryRun
	}
	if e.Action == Queue {
		return Wait
	}
	return Deny
}

func (e *Enforcement) overageFor() time.Duration {
	if e.OverageFor == 0 {
		return DefaultOverageFor
	}
	return e.OverageFor
}

func (e *Enforcement) minHeadroom() float64 {
	if e.MinHeadroom == 0 {
		return DefaultMinHeadroom
	}
	return e.MinHeadroom
}

// Episode tracks one soft-limit overage: when it began, so that it can be
// cut off after Enforcement.OverageFor. The zero value is ready; it is safe
// for concurrent use and allocation-free.
type Episode struct {
	since atomic.Int64 // unix nanos the overage began; 0 when under the limit
	spent atomic.Bool  // the episode ran out; hard until back under the limit
}

// Continue reports whether an overage at now may go on: true from the first
// call for up to max, then false until End.
func (s *Episode) Continue(now time.Time, max time.Duration) bool {
	if s.spent.Load() {
		return false
	}
	t := now.UnixNano()
	if t == 0 {
		t = 1
	}
	since := s.since.Load()
	if since == 0 {
		if s.since.CompareAndSwap(0, t) {
			return true
		}
		// Another request began the episode, or End ended it, in between.
		if since = s.since.Load(); since == 0 {
			return true
		}
	}
	if now.Sub(time.Unix(0, since)) > max {
		s.spent.Store(true)
		return false
	}
	return true
}

// End closes the episode: the layer is back under its limit.
func (s *Episode) End() {
	if s.since.Load() != 0 || s.spent.Load() {
		s.since.Store(0)
		s.spent.Store(false)
	}
}
