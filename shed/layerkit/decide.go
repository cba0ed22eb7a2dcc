package layerkit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
)

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
// applying e's mode, dry run and action in one place for every layer. soft is
// the Soft-mode episode of the limit; it may be nil for other modes. A
// request over several limits at once goes through DecideOver instead.
func Decide(e *shed.Enforcement, now time.Time, withinLimit, withinCeiling bool, soft *Episode) Verdict {
	if withinLimit {
		return Admit
	}
	if soft == nil {
		return DecideOver(e, now, withinCeiling)
	}
	return DecideOver(e, now, withinCeiling, soft)
}

// DecideOver is Decide for a request over one or more limits. In Soft mode
// soft holds the episode of every limit the request is over, and the
// overage is allowed only when each of them allows it; every episode
// records the request, even when another one refuses it, and even when it
// is over the ceiling. Soft without an episode refuses the overage.
func DecideOver(e *shed.Enforcement, now time.Time, withinCeiling bool, soft ...*Episode) Verdict {
	allow := false
	switch e.Mode {
	case shed.Soft:
		allow = withinCeiling && len(soft) > 0
		length, cool := overageFor(e), cooldown(e)
		for _, ep := range soft {
			if ep == nil || !ep.Over(now, length, cool) {
				allow = false
			}
		}
	case shed.Elastic:
		allow = withinCeiling && e.Headroom != nil && e.Headroom.Headroom() >= minHeadroom(e)
	}
	if allow {
		return AdmitOver
	}
	if e.DryRun {
		// Dry run never delays either: it only records what would happen.
		return AdmitDryRun
	}
	if e.Action == shed.Queue {
		return Wait
	}
	return Deny
}

func overageFor(e *shed.Enforcement) time.Duration {
	if e.OverageFor == 0 {
		return shed.DefaultOverageFor
	}
	return e.OverageFor
}

func cooldown(e *shed.Enforcement) time.Duration {
	if e.OverageCooldown == 0 {
		return overageFor(e)
	}
	return e.OverageCooldown
}

func minHeadroom(e *shed.Enforcement) float64 {
	if e.MinHeadroom == nil {
		return shed.DefaultMinHeadroom
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
