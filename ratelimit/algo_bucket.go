package ratelimit

import "sync/atomic"

// gcraCell is the token bucket and the leaky bucket (GCRA), which make the
// same decisions: GCRA is the token bucket written as one instant, the
// theoretical arrival time (TAT) at which the bucket would be full again.
// With T = Period/Quantity and τ = Burst·T, cost units are allowed at now
// when max(TAT, now) + cost·T − τ ≤ now. One word, updated by CAS.
//
// The figures: Remaining = ⌊(now + τ − TAT)/T⌋ units (the tokens left),
// ResetAfter = TAT − now (until the bucket is full), and when denied
// RetryAfter = max(TAT, now) + cost·T − τ − now.
type gcraCell struct {
	tat atomic.Int64 // Unix ns; dead once retired
}

func (c *gcraCell) init(_ *params, now int64) { c.tat.Store(now) }

func (c *gcraCell) take(p *params, now, cost int64) (Result, bool) {
	for {
		tat := c.tat.Load()
		if tat == dead {
			return Result{}, false
		}
		t0 := max(tat, now)
		next := t0 + cost*p.t
		if allowAt := next - p.tau; allowAt > now {
			return Result{Limit: p.q, Remaining: max(now+p.tau-t0, 0) / p.t,
				RetryAfter: nanos(allowAt - now), ResetAfter: nanos(t0 - now)}, true
		}
		if c.tat.CompareAndSwap(tat, next) {
			return Result{Allowed: true, Limit: p.q, Remaining: (now + p.tau - next) / p.t,
				ResetAfter: nanos(next - now)}, true
		}
	}
}

func (c *gcraCell) giveBack(p *params, now, cost int64) bool {
	for {
		tat := c.tat.Load()
		if tat == dead {
			return false
		}
		if tat <= now {
			return true // already full
		}
		if c.tat.CompareAndSwap(tat, max(tat-cost*p.t, now)) {
			return true
		}
	}
}

func (c *gcraCell) retire(_ *params, now, idle int64, force bool) bool {
	tat := c.tat.Load()
	if tat == dead || !force && tat > now-idle {
		return false
	}
	return c.tat.CompareAndSwap(tat, dead)
}

func (c *gcraCell) moveTo(dst *gcraCell) bool {
	for {
		tat := c.tat.Load()
		if tat == dead {
			return false
		}
		if c.tat.CompareAndSwap(tat, dead) {
			dst.tat.Store(tat)
			return true
		}
	}
}
