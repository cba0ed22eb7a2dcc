package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// Redis store defaults, used when the RedisConfig field is zero.
const (
	// DefaultRedisPrefix starts every key the Redis store writes.
	DefaultRedisPrefix = "loadshed:rl:"
	// DefaultRedisTimeout bounds each round trip to Redis (the same for
	// every Redis-backed layer).
	DefaultRedisTimeout = redisx.DefaultTimeout
	// DefaultProbeInterval is how long the store decides locally after Redis
	// failed before it tries Redis again (the same for every Redis-backed
	// layer).
	DefaultProbeInterval = redisx.DefaultProbeInterval
	// DefaultOverLimitKeys bounds the local cache of keys over their limit.
	DefaultOverLimitKeys = 10000
)

// maxRedisNanos bounds every duration the scripts compute with: Lua numbers
// are doubles, exact below 2^53, and the scripts need one bit of headroom.
const maxRedisNanos = int64(1) << 52

// RedisConfig configures a Redis store. The zero value is ready to use.
type RedisConfig struct {
	// Prefix starts every key (default DefaultRedisPrefix). It must not
	// contain '{' or '}', which would move the Cluster hash tag.
	Prefix string
	// Timeout bounds each round trip (default DefaultRedisTimeout). The
	// client must have ContextTimeoutEnabled set, or go-redis ignores the
	// deadline and waits its own ReadTimeout (3s by default); NewRedis
	// refuses a *redis.Client, *redis.ClusterClient or *redis.Ring without
	// it. Round trips starting within Timeout/16 of each other share one
	// deadline (no timer per call), so each gets between 15/16 of Timeout
	// and Timeout; a caller's context due to end sooner is used as it is.
	Timeout time.Duration
	// ProbeInterval is how long the store decides from its local fallback
	// after Redis failed, before it lets one request try Redis again
	// (default DefaultProbeInterval). A dead Redis thus costs one timeout per
	// interval, not one per request.
	ProbeInterval time.Duration
	// ExpectedInstances, when set, is how many processes share the limit.
	// While Redis is unreachable each one enforces its share of the limit:
	// Quantity and Burst divided by the instances, rounded down, so that the
	// fleet never admits more than the limit (a share that rounds to 0
	// refuses everything until Redis answers). Unset (0), the instances are
	// counted: each keeps a presence in Redis, refreshed every second, and
	// the share divides by the last count (1 before Redis ever answered).
	ExpectedInstances int
	// Fallback, when set, decides while Redis is unreachable instead of the
	// in-memory limiter of the share above (and no presence is kept).
	Fallback Store
	// OverLimitKeys bounds the local cache of keys Redis has found over
	// their limit, answered without a round trip until a unit is back
	// (default DefaultOverLimitKeys; negative disables the cache).
	OverLimitKeys int
	// Batch, when its Fraction is set, turns on the batched mode: see
	// BatchConfig. The zero value is the exact mode, one round trip per
	// decision.
	Batch BatchConfig
	// OnFallback, when set, is called after each decision taken from the
	// local fallback, with the Redis error behind it. It runs on the
	// request's goroutine and must be quick.
	OnFallback func(err error)
	// Clock is where the store reads time for its own bookkeeping: the
	// over-limit cache, the probe interval, batch ages and the fallback
	// limiter (default shed.SystemClock). Decisions taken by Redis read the
	// server's clock.
	Clock shed.Clock
}

// FallbackDecider is a Store that can tell whether a decision came from
// its local fallback because its shared store did not answer. Layers use it
// to mark the lease (shed.Lease.Fallback) and the event.
type FallbackDecider interface {
	Store
	// Decide is Allow that also reports whether the local fallback decided.
	Decide(ctx context.Context, key string, cost int64) (r Result, fallback bool, err error)
}

// Redis is the Redis-backed Store for one algorithm and one limit, shared
// by every process that uses the same Redis, prefix and algorithm. It is
// safe for concurrent use. docs/redis.md tells the whole story; in short:
//
// Decisions. Each is one atomic Lua script (EVALSHA, falling back to EVAL)
// that reads the server's TIME, so hosts' clocks play no part and any number
// of hosts never admit more than an exact algorithm's limit. The figures
// are those of the in-memory store.
//
// Keys. {<Prefix>:<algorithm>:<base64url SHA-256 of the key>}: the digest is
// in the Cluster hash tag, so no key, whatever its bytes or length, can move
// the tag or reach another key's state. Every write sets a
// TTL for as long as the state matters (a bucket until it is full, a
// window until it ends, the log until its newest unit expires), so idle keys
// vanish; the log holds at most Quantity members.
//
// Failure. Each round trip is bounded by RedisConfig.Timeout (the client
// needs ContextTimeoutEnabled). On a timeout or an outage the decision comes
// from an in-memory limiter of this instance's share of the limit
// (ExpectedInstances), with no error; Decide reports it. Redis is then left
// alone for ProbeInterval, after which one request probes it.
//
// Round trips. Keys found with no unit left are answered locally until one
// is back (OverLimitKeys). The batched mode (RedisConfig.Batch) leases
// chunks of the limit, overshooting by at most instances × (chunk − 1).
type Redis struct {
	client redis.UniversalClient
	alg    Algorithm
	limit  Limit
	script *redisx.Script
	keys   redisx.Keys
	algTag string

	timeout   time.Duration
	deadlines *redisx.Deadlines
	clock     shed.Clock
	onFall    func(error)

	// The fallback: the caller's, or the share among expected (when set)
	// or counted instances.
	userFall    Store
	expected    int
	presence    *redisx.Presence
	leave       func()
	shared      atomic.Pointer[shareFallback]
	releaseGate func()

	args staticArgs

	over  *overLimitCache
	batch *batcher
	// learnt is what Redis last said of each key (remaining, reset), from
	// which the fallback starts.
	learnt learntStates

	// gate keeps requests off Redis after an outage, but for one probe
	// per ProbeInterval; the layers on one client share it.
	gate *redisx.Gate

	// now, when set (by tests), replaces the server's TIME, so that step
	// tables run at fixed instants. ttlSlack pads every PEXPIRE (ms).
	now         func() time.Time
	ttlSlack    int64
	ttlSlackArg any
}

var _ FallbackDecider = (*Redis)(nil)

// NewRedis returns a Redis-backed limiter enforcing limit with alg.
//
// client may be a *redis.Client (single node or Sentinel failover), a
// *redis.ClusterClient or anything else implementing redis.UniversalClient;
// it must have ContextTimeoutEnabled set (see RedisConfig.Timeout).
func NewRedis(client redis.UniversalClient, alg Algorithm, limit Limit, cfg RedisConfig) (*Redis, error) {
	if err := redisx.CheckClient(client); err != nil {
		return nil, fmt.Errorf("ratelimit: NewRedis: %w", err)
	}
	if err := validateRedisLimit(alg, limit); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := cfg.options().WithDefaults(DefaultRedisPrefix)
	r := &Redis{
		client:   client,
		alg:      alg,
		limit:    limit,
		script:   scriptFor(alg),
		keys:     redisx.NewKeys(o.Prefix),
		algTag:   algKeyTags[alg],
		timeout:  o.Timeout,
		clock:    clockx.Or(cfg.Clock),
		onFall:   cfg.OnFallback,
		userFall: cfg.Fallback,
		expected: o.ExpectedInstances,
	}
	r.deadlines = redisx.NewDeadlines(r.timeout)
	r.gate, r.releaseGate = redisx.SharedGate(client, cfg.Clock, o.ProbeInterval)
	r.args = newStaticArgs(alg, limit)
	r.setTTLSlack(1)
	if r.userFall == nil && r.expected == 0 {
		r.presence, r.leave = redisx.JoinPresence(client, r.keys.Fixed(redisx.PresenceName), 0)
	}
	switch n := cfg.OverLimitKeys; {
	case n == 0:
		r.over = newOverLimitCache(DefaultOverLimitKeys)
	case n > 0:
		r.over = newOverLimitCache(n)
	}
	if cfg.Batch.Fraction > 0 {
		r.batch = newBatcher(cfg.Batch, alg, limit)
	}
	return r, nil
}

func (c RedisConfig) options() redisx.Options {
	return redisx.Options{Prefix: c.Prefix, Timeout: c.Timeout, ProbeInterval: c.ProbeInterval, ExpectedInstances: c.ExpectedInstances}
}

func (c RedisConfig) validate() error {
	errs := []error{c.options().Validate("ratelimit")}
	if err := c.Batch.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateRedisLimit adds to Limit.ValidateFor what the scripts' doubles
// need: every duration they compute below 2^52 ns (about 52 days).
func validateRedisLimit(alg Algorithm, l Limit) error {
	if err := l.ValidateFor(alg); err != nil {
		return err
	}
	p := int64(l.Period)
	if p >= maxRedisNanos {
		return fmt.Errorf("ratelimit: Limit.Period %v is too long for the Redis store (below %v)", l.Period, time.Duration(maxRedisNanos))
	}
	switch alg {
	case TokenBucket, LeakyBucket:
		if t := int64(l.Interval()); l.BurstOrQuantity() >= maxRedisNanos/t {
			return fmt.Errorf("ratelimit: Limit %v: Burst × Period/Quantity is too long for the Redis store (below %v)", l, time.Duration(maxRedisNanos))
		}
	case FixedWindow, SlidingWindow:
		// Aligning a window that is not whole seconds multiplies by 10 in
		// the script.
		if p%int64(time.Second) != 0 && p >= maxRedisNanos/10 {
			return fmt.Errorf("ratelimit: Limit.Period %v is too long for the Redis store unless it is whole seconds", l.Period)
		}
		if l.Quantity >= maxRedisNanos {
			return fmt.Errorf("ratelimit: Limit.Quantity %d is too large for the Redis store", l.Quantity)
		}
	}
	return nil
}

// Allow takes cost units for key if the limit allows it. When Redis does not
// answer within the timeout it decides from the local fallback instead and
// returns no error: use Decide to learn that it did. It returns an error
// only for bad arguments (ErrEmptyKey, ErrInvalidCost, ErrCostAboveBurst).
func (r *Redis) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	res, _, err := r.Decide(ctx, key, cost)
	return res, err
}

// Decide is Allow that also reports whether the local fallback decided.
func (r *Redis) Decide(ctx context.Context, key string, cost int64) (Result, bool, error) {
	if err := checkRequest(r.limit, r.alg, key, cost); err != nil {
		return Result{Limit: r.limit.Quantity}, false, err
	}
	now := r.clock.Now()
	if r.batch != nil {
		return r.batch.decide(ctx, r, key, cost, now)
	}
	var epoch uint64
	if r.over != nil {
		if res, ok := r.over.check(key, now, r.limit.Quantity); ok {
			return res, false, nil
		}
		epoch = r.over.epoch.Load()
	}
	rep, err := r.roundTrip(ctx, opAllow, key, cost, cost, now)
	if err != nil {
		return r.decideLocally(ctx, key, cost, err)
	}
	r.noteOver(key, now, rep, epoch)
	return rep.result(r.limit.Quantity), false, nil
}

// roundTrip runs the script unless Redis failed recently, and records how
// it went.
// On a Cluster, replies saying the script did not run (a slot migrating,
// a failover in progress: redisx.NotRun) are retried within the timeout,
// and only the node serving the key's slot is left alone after an outage.
func (r *Redis) roundTrip(ctx context.Context, op, key string, want, takeMax int64, now time.Time) (reply, error) {
	t := now.UnixNano()
	rk := r.keyOf(key)
	if !r.gate.TryKey(t, rk) {
		return reply{}, errRedisDown
	}
	bound := r.deadlines.Bound(ctx)
	var rep reply
	err := redisx.Retry(bound, func() error {
		var err error
		rep, err = r.call(bound, op, rk, want, takeMax)
		return err
	})
	switch {
	case redisx.CallerGone(ctx):
		// Cut short by the caller's own context: says nothing about Redis.
	case redisx.IsOutage(err):
		// At the failure, not at the start: the interval counts from when
		// Redis was last found unresponsive, so the layers after this one
		// in the same request do not wait for it again.
		r.gate.FailedKey(r.clock.Now().UnixNano(), rk)
	default:
		// It answered, if only with an error for this key.
		r.gate.AnsweredKey(t, rk)
		if err == nil && op == opAllow {
			r.learnt.note(key, rep.remaining, t+rep.reset)
		}
	}
	return rep, err
}

// Refund gives back cost units taken for key where the algorithm can: the
// bucket's time, the current window's count, the log's newest entries. While
// Redis is unreachable it refunds the local fallback.
func (r *Redis) Refund(ctx context.Context, key string, cost int64) error {
	if err := checkRequest(r.limit, r.alg, key, cost); err != nil {
		return err
	}
	if r.over != nil {
		r.over.forget(key)
	}
	if r.batch != nil && r.batch.refund(key, cost, r.clock.Now()) {
		return nil
	}
	_, err := r.roundTrip(ctx, opRefund, key, cost, cost, r.clock.Now())
	if r.over != nil {
		// Again after: a denial answered before the refund reached Redis
		// may have been cached meanwhile.
		r.over.forget(key)
	}
	if err != nil {
		return r.fallbackStore().Refund(ctx, key, cost)
	}
	return nil
}

// Limit returns the limit enforced.
func (r *Redis) Limit() Limit { return r.limit }

// Algorithm returns the algorithm used.
func (r *Redis) Algorithm() Algorithm { return r.alg }

// Close releases the fallback limiter NewRedis built, this instance's
// presence and its share of the client's gate. It does not close the
// client, which the caller owns.
func (r *Redis) Close() error {
	if f := r.shared.Swap(nil); f != nil {
		closeStore(f.lim)
	}
	if r.leave != nil {
		r.leave()
	}
	r.releaseGate()
	return nil
}

// Instances returns the instances the outage share divides by now:
// RedisConfig.ExpectedInstances when set, else the live instances last
// counted in Redis (1 before any count).
func (r *Redis) Instances() int {
	counted := 0
	if r.presence != nil {
		counted = r.presence.Count()
	}
	return redisx.Instances(r.expected, counted)
}

// setTTLSlack sets the milliseconds added to every TTL (1, or more in tests
// whose fixed clock lags real time).
func (r *Redis) setTTLSlack(ms int64) {
	r.ttlSlack = ms
	r.ttlSlackArg = strconv.FormatInt(ms, 10)
}

// noteOver remembers a key Redis found with no unit left, so the next
// requests for it are answered locally until one is back.
func (r *Redis) noteOver(key string, now time.Time, rep reply, epoch uint64) {
	if r.over == nil || rep.remaining > 0 || rep.retry1 <= 0 {
		return
	}
	r.over.add(key, now, time.Duration(rep.retry1), time.Duration(rep.reset), epoch)
}

// keyOf returns the key under which the store keeps key's state:
//
//	{<prefix>:<algorithm>:<base64url SHA-256 of key>}
//
// (the prefix without its trailing ':'). The whole key is the Cluster hash
// tag, and the digest in it, so whatever bytes the key holds
// (braces, spaces, newlines, megabytes) they can neither move the tag nor
// reach another key's state, and every Redis key has the same bounded size.
func (r *Redis) keyOf(key string) string {
	return r.keys.Key(r.algTag, key)
}

// algKeyTags name each algorithm in the key, so that two limiters of
// different algorithms under one prefix never read each other's state.
var algKeyTags = [...]string{
	TokenBucket:   "tb",
	LeakyBucket:   "gcra",
	FixedWindow:   "fw",
	SlidingLog:    "log",
	SlidingWindow: "sw",
}
