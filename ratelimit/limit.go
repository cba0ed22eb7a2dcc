package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Limit is a quantity of units per period, with a burst where the algorithm
// has one (token bucket, leaky bucket). Build one with PerSecond, PerMinute,
// PerHour or Per, and set Burst when it should differ from Quantity.
type Limit struct {
	// Quantity is how many units the limit allows per Period. Required, ≥ 1.
	Quantity int64
	// Period is the window the quantity applies to. Required, > 0.
	Period time.Duration
	// Burst is the most units token and leaky buckets admit at once
	// (default Quantity). The window algorithms ignore it.
	Burst int64
}

// Per returns a limit of n units per period, burst n.
func Per(n int64, period time.Duration) Limit { return Limit{Quantity: n, Period: period, Burst: n} }

// PerSecond returns a limit of n units per second, burst n.
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// PerMinute returns a limit of n units per minute, burst n.
func PerMinute(n int64) Limit { return Per(n, time.Minute) }

// PerHour returns a limit of n units per hour, burst n.
func PerHour(n int64) Limit { return Per(n, time.Hour) }

// BurstOrQuantity returns Burst, or Quantity when Burst is unset.
func (l Limit) BurstOrQuantity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Quantity
}

// String reads "100 req/1m0s burst 20".
func (l Limit) String() string {
	return strconv.FormatInt(l.Quantity, 10) + " req/" + l.Period.String() +
		" burst " + strconv.FormatInt(l.BurstOrQuantity(), 10)
}

// Validate reports invalid fields by name.
func (l Limit) Validate() error {
	var errs []error
	if l.Quantity < 1 {
		errs = append(errs, fmt.Errorf("ratelimit: Limit.Quantity must be at least 1, got %d", l.Quantity))
	}
	if l.Period <= 0 {
		errs = append(errs, fmt.Errorf("ratelimit: Limit.Period must be positive, got %v", l.Period))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("ratelimit: Limit.Burst must not be negative, got %d", l.Burst))
	}
	return errors.Join(errs...)
}

// Algorithm names a rate-limiting algorithm.
type Algorithm uint8

const (
	// TokenBucket refills continuously at Quantity/Period up to Burst.
	TokenBucket Algorithm = iota
	// LeakyBucket is GCRA, the leaky bucket as a meter: an even outflow of
	// Quantity/Period with Burst units of tolerance. With the queue action it
	// shapes traffic to a constant outflow.
	LeakyBucket
	// FixedWindow counts units per aligned window of Period.
	FixedWindow
	// SlidingLog keeps each admitted unit's time and counts those within the
	// last Period: exact, and the costliest in memory.
	SlidingLog
	// SlidingWindow counts the current fixed window plus the previous one
	// weighted by its overlap with the last Period: approximate, cheap.
	SlidingWindow
)

var algorithmNames = [...]string{"token-bucket", "leaky-bucket", "fixed-window", "sliding-log", "sliding-window"}

// String returns the algorithm's name: "token-bucket", "leaky-bucket",
// "fixed-window", "sliding-log" or "sliding-window".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm parses an algorithm's name as String prints it.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("ratelimit: unknown algorithm %q (valid: token-bucket, leaky-bucket, fixed-window, sliding-log, sliding-window)", s)
}

// Result is one decision and the figures behind the RateLimit headers, exact
// for the algorithm.
type Result struct {
	// Allowed says whether the units were taken.
	Allowed bool
	// Limit is the limit's quantity (the headers' q).
	Limit int64
	// Remaining is how many units could still be taken now.
	Remaining int64
	// RetryAfter is how long until a request of the same cost may succeed;
	// zero when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is fully available again.
	ResetAfter time.Duration
}

// Store decides for one limit and one algorithm, per key. Implementations
// are safe for concurrent use.
type Store interface {
	// Allow takes cost units for key if the limit allows it.
	Allow(ctx context.Context, key string, cost int64) (Result, error)
	// Refund gives back cost units taken for key, where the algorithm can
	// (a request rejected by a later rule or layer never ran).
	Refund(ctx context.Context, key string, cost int64) error
	// Limit returns the limit enforced.
	Limit() Limit
	// Algorithm returns the algorithm used.
	Algorithm() Algorithm
}

// Errors callers may branch on.
var (
	// ErrCostAboveBurst: a request costs more than the limit can ever admit
	// at once; it can never succeed.
	ErrCostAboveBurst = errors.New("ratelimit: cost exceeds the limit's burst")
	// ErrEmptyKey: the key is empty.
	ErrEmptyKey = errors.New("ratelimit: empty key")
)

// ErrInvalidCost: a cost below 1 was asked for.
var ErrInvalidCost = errors.New("ratelimit: cost must be at least 1")

// MaxSlidingLogQuantity is the largest Quantity a SlidingLog limit may have:
// the log keeps up to Quantity entries per key, so its memory grows with it.
// Larger limits should use SlidingWindow.
const MaxSlidingLogQuantity = 1 << 16

// maxTolerance bounds Burst × Interval (about 73 years) so that a
// Unix-nanosecond instant plus twice it cannot overflow an int64 before
// the year 2262.
const maxTolerance = int64(1) << 61

// Interval is the emission interval of the token and leaky buckets: Period
// divided by Quantity, rounded up to a whole nanosecond so that rounding can
// never admit more than the limit.
func (l Limit) Interval() time.Duration {
	if l.Quantity < 1 || l.Period <= 0 {
		return 0
	}
	return time.Duration((int64(l.Period) + l.Quantity - 1) / l.Quantity)
}

// MaxCost is the largest cost one request may ask of the limit under alg:
// the burst for the buckets, the quantity for the windows. A larger cost can
// never succeed and is refused with ErrCostAboveBurst.
func (l Limit) MaxCost(alg Algorithm) int64 {
	switch alg {
	case TokenBucket, LeakyBucket:
		return l.BurstOrQuantity()
	}
	return l.Quantity
}

// ValidateFor checks the limit and that alg can enforce it: a known
// algorithm, a burst × interval within range for the buckets, and a quantity
// of at most MaxSlidingLogQuantity for the sliding log.
func (l Limit) ValidateFor(alg Algorithm) error {
	if err := l.Validate(); err != nil {
		return err
	}
	switch alg {
	case TokenBucket, LeakyBucket:
		if int64(l.Period) < l.Quantity {
			return fmt.Errorf("ratelimit: Limit %v: Quantity must not exceed Period in nanoseconds (%d) for %v", l, int64(l.Period), alg)
		}
		if t := int64(l.Interval()); l.BurstOrQuantity() > maxTolerance/t {
			return fmt.Errorf("ratelimit: Limit %v: Burst × Period/Quantity is too long for %v (at most %v)", l, alg, time.Duration(maxTolerance))
		}
	case FixedWindow, SlidingWindow:
		if int64(l.Period) > maxTolerance/2 {
			return fmt.Errorf("ratelimit: Limit.Period %v is too long (at most %v)", l.Period, time.Duration(maxTolerance/2))
		}
	case SlidingLog:
		if l.Quantity > MaxSlidingLogQuantity {
			return fmt.Errorf("ratelimit: Limit.Quantity %d is too large for sliding-log (at most %d entries per key); use sliding-window", l.Quantity, MaxSlidingLogQuantity)
		}
		if int64(l.Period) > maxTolerance {
			return fmt.Errorf("ratelimit: Limit.Period %v is too long (at most %v)", l.Period, time.Duration(maxTolerance))
		}
	default:
		return fmt.Errorf("ratelimit: unknown algorithm %v", alg)
	}
	return nil
}

// checkRequest reports what is wrong with one decision's arguments for a
// limit under alg: an empty key (ErrEmptyKey), a cost below 1
// (ErrInvalidCost) or above MaxCost (ErrCostAboveBurst). Every store calls
// it first, so they refuse the same requests.
func checkRequest(l Limit, alg Algorithm, key string, cost int64) error {
	if key == "" {
		return ErrEmptyKey
	}
	if cost < 1 {
		return fmt.Errorf("%w, got %d", ErrInvalidCost, cost)
	}
	if max := l.MaxCost(alg); cost > max {
		return fmt.Errorf("%w: cost %d, %v admits at most %d at once under %v", ErrCostAboveBurst, cost, l, max, alg)
	}
	return nil
}
