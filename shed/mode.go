package shed

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
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
// applying mode, dry run and action in one place for every layer. soft is
// the Soft-mode episode of the limit; it may be nil for other modes. A
// request over several limits at once goes through DecideOver instead.
func (e *Enforcement) Decide(now time.Time, withinLimit, withinCeiling bool, soft *Episode) Verdict {
	if withinLimit {
		return Admit
	}
	if soft == nil {
		return e.DecideOver(now, withinCeiling)
	}
	return e.DecideOver(now, withinCeiling, soft)
}

// DecideOver is Decide for a request over one or more limits. In Soft mode
// soft holds the episode of every limit the request is over, and the
// overage is allowed only when each of them allows it; every episode
// records the request, even when another one refuses it, and even when it
// is over the ceiling. Soft without an episode refuses the overage.
func (e *Enforcement) DecideOver(now time.Time, withinCeiling bool, soft ...*Episode) Verdict {
	allow := false
	switch e.Mode {
	case Soft:
		allow = withinCeiling && len(soft) > 0
		length, cool := e.overageFor(), e.cooldown()
		for _, ep := range soft {
			if ep == nil || !ep.Over(now, length, cool) {
				allow = false
			}
		}
	case Elastic:
		allow = withinCeiling && e.Headroom != nil && e.Headroom.Headroom() >= e.minHeadroom()
	}
	if allow {
		return AdmitOver
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

func (e *Enforcement) cooldown() time.Duration {
	if e.OverageCooldown == 0 {
		return e.overageFor()
	}
	return e.OverageCooldown
}

func (e *Enforcement) minHeadroom() float64 {
	if e.MinHeadroom == nil {
		return DefaultMinHeadroom
	}
	return *e.MinHeadroom
}

// Episode is the Soft-mode overage history of one limit: when the current
// episode began and when the limit was last exceeded. An episode allows the
// overage for OverageFor from its start. A new one begins with a request
// over the limit only when the limit has not been exceeded for a cool-down
// (OverageCooldown) and the previous episode began more than OverageFor +
// OverageCooldown ago (or with the first request over the limit ever). So
// the overage lasts at most OverageFor in any OverageFor + OverageCooldown,
// and under sustained overload, when requests over the limit keep coming,
// there is one episode and then the hard limit until the load abates.
// Requests within the limit do not touch it: a layer at twice its limit
// dips under it between requests, and that must not earn a new episode.
//
// The zero value is ready. It is safe for concurrent use and
// allocation-free; layers consult it only for requests over their limit.
type Episode struct {
	// since and last are written under mu, but read and advanced without
	// it on the path every request over the limit takes under overload:
	// within a cool-down of the last overage no episode can begin, so only
	// last moves, and it only moves forward.
	mu    sync.Mutex
	since atomic.Int64 // Unix ns the current episode began
	last  atomic.Int64 // Unix ns the limit was last exceeded; 0: never
}

// Over records a request over the limit at now and reports whether the
// overage may admit it: whether now lies within length of the start of the
// current episode, or begins a new one (see Episode).
func (s *Episode) Over(now time.Time, length, cooldown time.Duration) bool {
	t := now.UnixNano()
	if last := s.last.Load(); last != 0 && t-last < int64(cooldown) {
		s.advance(t)
		return t-s.since.Load() <= int64(length)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.last.Load()
	if last == 0 || t-last >= int64(cooldown) && t-s.since.Load() > int64(length)+int64(cooldown) {
		s.since.Store(t)
	}
	s.advance(t)
	return t-s.since.Load() <= int64(length)
}

// advance moves last forward to t, never back. It keeps last to the
// millisecond, so that under overload, when every request is over the
// limit, the shared word is read far more often than written.
func (s *Episode) advance(t int64) {
	for {
		last := s.last.Load()
		if t-last < int64(time.Millisecond) && last != 0 || s.last.CompareAndSwap(last, t) {
			return
		}
	}
}

// Hold records that the limit is still exceeded at now, with no request
// asking: a concurrency layer whose overage requests are still in flight
// calls it when a request arrives, and when the last of them leaves, so
// that the cool-down counts from the moment it is back within the limit.
// It does nothing before the first Over.
func (s *Episode) Hold(now time.Time) {
	t := now.UnixNano()
	for {
		last := s.last.Load()
		if last == 0 || t-last < int64(time.Millisecond) || s.last.CompareAndSwap(last, t) {
			return
		}
	}
}

// End forgets the episode and its cool-down: the next request over the
// limit begins a new episode at once. Layers do not call it when they get
// back under their limit (that would let a layer at twice its limit, which
// dips under it between requests, start a new episode every time); it is
// for a state reset, such as a limit that was reconfigured.
func (s *Episode) End() {
	if s.last.Load() == 0 {
		return // nothing to forget: one atomic load for callers on every admission
	}
	s.mu.Lock()
	s.last.Store(0)
	s.since.Store(0)
	s.mu.Unlock()
}
