package rls

import (
	"fmt"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// Domain is one domain's rules, as an envoyproxy/ratelimit file holds them:
// a tree of descriptors, each entry a key and an optional value.
type Domain struct {
	// Name is the domain a request names. Required.
	Name string
	// Descriptors are the top-level entries of the tree.
	Descriptors []Descriptor
	// File is where the domain was read from, for errors and logs.
	File string
}

// Descriptor is one entry of a domain's tree. A request descriptor whose
// entries lead down to it, entry for entry and ending here, is counted by
// its limits.
type Descriptor struct {
	// Key is the entry's key. Required.
	Key string
	// Value, when set, matches that value only; a trailing or inner '*'
	// matches any run of characters. Unset, the entry matches any value,
	// and each distinct value is counted apart.
	Value string
	// Limits all apply to a request that ends here: it is admitted when
	// every one admits it. envoyproxy/ratelimit allows one.
	Limits []Limit
	// Unlimited answers OK with no limit (envoyproxy/ratelimit's
	// rate_limit.unlimited).
	Unlimited bool
	// ShadowMode counts and records, and always answers OK.
	ShadowMode bool
	// DetailedMetric records this rule's decisions by the request's values
	// (bounded: see MaxDetailedValues) instead of by the rule alone.
	DetailedMetric bool
	// ShareThreshold, on an entry whose Value has a '*', counts every
	// value the wildcard matches under one count (the pattern's), where
	// each would otherwise be counted apart.
	ShareThreshold bool
	// ValueToMetric puts the request's value of this entry into the
	// metric name of the rules below it, where the name would hold the
	// wildcard pattern or the key alone (bounded: see MaxDetailedValues).
	ValueToMetric bool
	// QuotaMode makes this rule a quota: a request is over only when every
	// quota it meets is over (or any ordinary limit is), so that a client
	// may pick whichever of several quotas still has room.
	QuotaMode bool
	// Metadata is returned to the gateway in the response's dynamic
	// metadata when a request passes this rule (see
	// Config.ResponseDynamicMetadata). Values are YAML's scalars, lists
	// and maps with string keys.
	Metadata map[string]any
	// Descriptors nest below this one.
	Descriptors []Descriptor

	// path locates the entry in its file, for errors.
	path string
}

// Limit is one limit of a descriptor.
type Limit struct {
	// Name names the limit in responses and metrics, and is what another
	// limit's Replaces names.
	Name string
	// RequestsPerUnit and Unit are the limit as envoyproxy/ratelimit
	// writes it, and as the response's current_limit reports it.
	// RequestsPerUnit 0 rejects every request, as there.
	RequestsPerUnit uint32
	Unit            pb.RateLimitResponse_RateLimit_Unit
	// Period is the window or refill period: Unit times its multiplier, or
	// a duration given as it is.
	Period time.Duration
	// Algorithm counts the limit (envoyproxy/ratelimit's files default to
	// fixed-window, the only one it has).
	Algorithm ratelimit.Algorithm
	// Burst is the buckets' burst (default RequestsPerUnit).
	Burst int64
	// Replaces names the limits this one disables when both apply to one
	// request.
	Replaces []string
	// Soft, when set, lets a key past the limit by a bounded overage for a
	// bounded time, as ratelimit's Layer does in shed.Soft mode: past the
	// limit, a key may go Overage further for at most OverageFor per
	// episode (shed.Enforcement's defaults), and the status says OK while
	// it does; the event is marked Over. Its Mode must be shed.Soft; the
	// overage and the episodes are this instance's own, in memory.
	Soft *shed.Enforcement
}

// unitPeriods are envoyproxy/ratelimit's unit lengths (a month is 30
// days, a year 365, as there).
var unitPeriods = map[pb.RateLimitResponse_RateLimit_Unit]time.Duration{
	pb.RateLimitResponse_RateLimit_SECOND: time.Second,
	pb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	pb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	pb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	pb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// unitFor is the largest unit that divides d, for a limit given as a
// duration (current_limit can only name a unit).
func unitFor(d time.Duration) pb.RateLimitResponse_RateLimit_Unit {
	best := pb.RateLimitResponse_RateLimit_SECOND
	for u, p := range unitPeriods {
		if d%p == 0 && p > unitPeriods[best] {
			best = u
		}
	}
	return best
}

// store limit: the ratelimit.Limit the limit's store enforces.
func (l *Limit) limit() ratelimit.Limit {
	return ratelimit.Limit{Quantity: int64(l.RequestsPerUnit), Period: l.Period, Burst: l.Burst}
}

// check reports what is wrong with the limit.
func (l *Limit) check() error {
	if l.Period <= 0 {
		return fmt.Errorf("the period must be positive, got %v", l.Period)
	}
	if l.RequestsPerUnit == 0 {
		return nil // rejects everything, with no store
	}
	if l.Burst < 0 {
		return fmt.Errorf("burst must not be negative, got %d", l.Burst)
	}
	return l.limit().ValidateFor(l.Algorithm)
}
