package ratelimit

import "time"

// nextUnit is how long until more units of a limit are made available: the
// RateLimit field's t as draft-ietf-httpapi-ratelimit-headers-10 defines
// it ("the number of seconds until additional quota ... is made
// available"), from a Result, whose ResetAfter runs until the limit is
// whole again.
//
//   - TokenBucket, LeakyBucket: units come back one per Interval, the last
//     at ResetAfter, so the next one comes at ResetAfter modulo the
//     Interval (3 per minute, two taken: 20 s, not 40).
//   - FixedWindow: every unit comes back at the window's end, ResetAfter.
//   - SlidingLog: the oldest entry expires first, within one Period; the
//     Result does not say when, so the Period bounds it (never early).
//   - SlidingWindow: the counter's units come back as the previous
//     window's weight fades. When ResetAfter runs past one Period, units
//     of the current window are in play; they fade over the next window,
//     from its start at ResetAfter − Period, and the first of n in use is
//     back at most Period/n later (q=3;w=60, all three taken 9 s into a
//     window: 71 s, not 111). Units of the previous window may come back
//     sooner; the bound is never early.
//
// A denied request's RetryAfter, when sooner, wins: it is when units for
// that request come back.
func nextUnit(alg Algorithm, lim Limit, r Result) time.Duration {
	t := r.ResetAfter
	if t <= 0 {
		return 0
	}
	switch alg {
	case TokenBucket, LeakyBucket:
		if iv := lim.Interval(); iv > 0 {
			t = (t-1)%iv + 1
		}
	case SlidingLog:
		t = min(t, lim.Period)
	case SlidingWindow:
		if used := r.Limit - r.Remaining; t > lim.Period && used > 0 {
			t = t - lim.Period + (lim.Period+time.Duration(used)-1)/time.Duration(used)
		}
	}
	if r.RetryAfter > 0 && r.RetryAfter < t {
		t = r.RetryAfter
	}
	return t
}
