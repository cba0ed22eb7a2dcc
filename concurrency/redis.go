package concurrency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redisgate"
	"github.com/loadshed/loadshed/shed"
)

// Defaults of RedisConfig's optional fields.
const (
	DefaultPrefix        = "loadshed:concurrency"
	DefaultTTL           = 10 * time.Second
	DefaultTimeout       = 50 * time.Millisecond
	DefaultProbeInterval = 250 * time.Millisecond
)

// RedisConfig configures a RedisLayer: the limits of Config, counted over
// the whole fleet in Redis.
type RedisConfig struct {
	// Config holds the limits, fleet-wide, and how they are enforced.
	// Adaptive limits and the Queue action are not supported fleet-wide.
	Config
	// Client is the shared store. Required. Its ContextTimeoutEnabled
	// option must be true: without it go-redis ignores context deadlines,
	// and a slow Redis would hold requests past Timeout instead of falling
	// back.
	Client redis.UniversalClient
	// Prefix starts every key (default "loadshed:concurrency"). Layers with
	// different limits need different prefixes. It must not contain braces.
	Prefix string
	// TTL is how long a lease lives in Redis without renewal: the longest a
	// crashed host's requests keep counting (default 10s). It must exceed
	// RenewEvery.
	TTL time.Duration
	// RenewEvery is how often this instance renews the leases it holds, in
	// one batch (default TTL/3).
	RenewEvery time.Duration
	// Timeout bounds each Redis call on the request path (default 50ms).
	// Past it the request is decided by the local share instead.
	Timeout time.Duration
	// ExpectedInstances is how many instances share the limits (default 1,
	// as in ratelimit.RedisConfig). While Redis does not answer, this
	// instance admits its share: each limit ÷ ExpectedInstances, rounded
	// up. Set it to the fleet's size, or an outage lets every instance admit
	// the whole limit.
	ExpectedInstances int
	// ProbeInterval is how often, while falling back, one request tries Redis
	// again (default 250ms); the others go straight to the local share.
	ProbeInterval time.Duration
	// AsyncRelease, when set, makes Release return at once: removals are
	// gathered and sent in one pipeline about 5ms later, so a request pays
	// one round trip (its acquire) instead of two, and the fleet sees its
	// slot free a few milliseconds late (default off).
	AsyncRelease bool
}

func (c RedisConfig) withDefaults() RedisConfig {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ExpectedInstances == 0 {
		c.ExpectedInstances = 1
	}
	return c
}

// Validate reports every invalid field, by name.
func (c RedisConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Adaptive != nil {
		errs = append(errs, errors.New("concurrency: RedisConfig.Adaptive is not supported fleet-wide: use an adaptive local Layer"))
	}
	if c.Enforcement.Action == shed.Queue {
		errs = append(errs, errors.New("concurrency: RedisConfig.Enforcement.Action Queue is not supported fleet-wide: another host's release cannot wake a waiter here"))
	}
	if err := redisgate.CheckClient(c.Client); err != nil {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.Client: %w", err))
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.Prefix must not contain braces, got %q", c.Prefix))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL must not be negative, got %v", c.TTL))
	}
	if c.RenewEvery < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.RenewEvery must not be negative, got %v", c.RenewEvery))
	}
	d := c.withDefaults()
	if c.TTL >= 0 && c.RenewEvery >= 0 && d.TTL <= d.RenewEvery {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL (%v) must exceed RedisConfig.RenewEvery (%v), or leases expire between renewals", d.TTL, d.RenewEvery))
	}
	if d.TTL > 0 && d.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL must be at least 1ms (Redis keeps milliseconds), got %v", c.TTL))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.Timeout must not be negative, got %v", c.Timeout))
	}
	if c.ExpectedInstances < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.ExpectedInstances must not be negative, got %d", c.ExpectedInstances))
	}
	if c.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.ProbeInterval must not be negative, got %v", c.ProbeInterval))
	}
	return errors.Join(errs...)
}

// RedisLayer limits requests in flight across a fleet: each admitted
// request is a lease in a Redis sorted set scored by its expiry, renewed in
// batches while it runs, removed when it ends, and dropped by Redis after
// RedisConfig.TTL if its host dies. When Redis errs or is slow it decides
// from this instance's share of the limits, and goes back to Redis as soon
// as Redis answers. It implements shed.Layer and shed.Releaser and is safe
// for concurrent use. Close stops its renewer.
type RedisLayer struct {
	name       string
	keyBy      KeyBy
	keyPolicy  string
	limit      int64
	perKey     int64
	enf        shed.Enforcement
	clock      shed.Clock
	retryAfter time.Duration
	client     redis.UniversalClient
	prefix     string
	ttl        time.Duration
	renewEvery time.Duration
	timeout    time.Duration
	async      bool
	instance   string // this instance's random id, the first part of every member
	allKey     string // the overall sorted set; "" without an overall limit

	local *Layer // the fallback: this instance's share
	seq   atomic.Uint64
	// gate keeps requests off Redis after an outage, but for one probe per
	// ProbeInterval.
	gate  *redisgate.Gate
	epAll shed.Episode

	mu      sync.Mutex
	held    map[*redisLease]struct{} // leases to renew
	pending []*redisLease            // releases Redis did not confirm, retried by the renewer
	timer   shed.Timer
	soon    bool // a prompt flush of pending is scheduled
	closed  bool

	stats redisStats
}

type redisStats struct {
	lost atomic.Int64
}

// redisLease is what a lease held in Redis points at (Lease.Ref).
type redisLease struct {
	owner    *RedisLayer
	seq      uint64 // Lease.ID
	member   string
	keys     []string
	cost     int64
	expires  atomic.Int64 // unix nanos, local clock: after it the lease is gone from Redis anyway
	released atomic.Bool
	// recheck is set for an acquire that ended without an answer: its
	// script may still be on its way to Redis, behind the first clean-up, so
	// it is removed twice (promptly, and again at the renewer's next tick).
	// Guarded by RedisLayer.mu while pending.
	recheck bool
}

// NewRedis checks cfg and returns a fleet-wide limiter, with its renewer
// running.
func NewRedis(cfg RedisConfig) (*RedisLayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	lc := cfg.Config
	lc.Limit = share(cfg.Limit, cfg.ExpectedInstances)
	lc.PerKey = share(cfg.PerKey, cfg.ExpectedInstances)
	local, err := New(lc)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("concurrency: instance id: %w", err)
	}
	r := &RedisLayer{
		name:       local.name,
		keyBy:      cfg.KeyBy,
		keyPolicy:  local.keyPolicy,
		limit:      cfg.Limit,
		perKey:     cfg.PerKey,
		enf:        cfg.Enforcement,
		clock:      local.clock,
		retryAfter: local.retryAfter,
		client:     cfg.Client,
		prefix:     cfg.Prefix,
		ttl:        cfg.TTL,
		renewEvery: cfg.RenewEvery,
		timeout:    cfg.Timeout,
		gate:       redisgate.New(cfg.ProbeInterval),
		async:      cfg.AsyncRelease,
		instance:   hex.EncodeToString(id[:]),
		local:      local,
		held:       make(map[*redisLease]struct{}),
	}
	if r.limit > 0 {
		r.allKey = "{" + r.prefix + "}:all"
	}
	r.mu.Lock()
	r.timer = r.clock.AfterFunc(r.renewEvery, r.tick)
	r.mu.Unlock()
	return r, nil
}

// Name returns the layer's name.
func (r *RedisLayer) Name() string { return r.name }

// Local returns the limiter that decides, with this instance's share of the
// limits, while Redis does not answer.
func (r *RedisLayer) Local() *Layer { return r.local }

// Fallback reports whether the limiter is deciding locally now because
// Redis did not answer.
func (r *RedisLayer) Fallback() bool { return r.gate.Down() }

// Held returns how many leases this instance holds in Redis (and renews).
func (r *RedisLayer) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// Lost returns how many leases expired in Redis while their request still
// ran (renewals failed for longer than the TTL).
func (r *RedisLayer) Lost() int64 { return r.stats.lost.Load() }

// Fallbacks returns how many times the limiter switched to its local share.
func (r *RedisLayer) Fallbacks() int64 { return r.gate.Outages() }

// KeyFor returns the sorted set that counts req's key (its Request.Key or
// Request.Route), or "" without a per-key limit. With an overall limit every
// key shares the hash tag of the overall set ("{prefix}"), since one script
// updates both; otherwise each key has its own tag ("{prefix:key}") so that
// keys spread over a Cluster.
func (r *RedisLayer) KeyFor(req shed.Request) string {
	if r.perKey == 0 {
		return ""
	}
	k := req.Key
	if r.keyBy == KeyByRoute {
		k = req.Route
	}
	k = escapeKey(k)
	if r.allKey != "" {
		return "{" + r.prefix + "}:k:" + k
	}
	return "{" + r.prefix + ":k:" + k + "}"
}

// OverallKey returns the sorted set that counts every request, or "" without
// an overall limit.
func (r *RedisLayer) OverallKey() string { return r.allKey }

// maxKeyLen is the longest user key kept readable; longer ones are hashed.
const maxKeyLen = 128

// escapeKey makes a user key safe inside a hash tag and a Redis key: braces
// (which would end or open the tag), '%' (the escape itself) and control
// characters (newlines) are percent-encoded; keys longer than maxKeyLen
// become "#" and a SHA-256 prefix, so a key's length is bounded.
func escapeKey(k string) string {
	if len(k) > maxKeyLen {
		sum := sha256.Sum256([]byte(k))
		return "#" + hex.EncodeToString(sum[:16])
	}
	clean := true
	for i := 0; i < len(k); i++ {
		if c := k[i]; c == '{' || c == '}' || c == '%' || c == '#' || c < 0x20 || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return k
	}
	const digits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(k) + 8)
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '{' || c == '}' || c == '%' || c == '#' || c < 0x20 || c == 0x7f {
			b.WriteByte('%')
			b.WriteByte(digits[c>>4])
			b.WriteByte(digits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// acquireScript admits a lease if every sorted set has room for it.
// KEYS: the sets (per key first, then overall). ARGV: member, cost, TTL in
// ms, then each set's bound. It drops expired members first, and reads the
// time from Redis, so hosts' clocks never matter. Returns {1, counts...}
// after adding, or {0, i, count} when set i had no room.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member, cost, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local counts = {1}
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  local n = redis.call('ZCARD', k)
  if n + cost > tonumber(ARGV[3 + i]) then
    return {0, i, n}
  end
  counts[i + 1] = n + cost
end
-- In chunks: unpack has a limit on how many values it spreads.
for j0 = 1, cost, 1000 do
  local members = {}
  for j = j0, math.min(cost, j0 + 999) do
    members[#members + 1] = now + ttl
    members[#members + 1] = (j == 1) and member or (member .. '#' .. j)
  end
  for _, k in ipairs(KEYS) do
    redis.call('ZADD', k, unpack(members))
  end
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then
    redis.call('PEXPIRE', k, ttl)
  end
end
return counts
`)

// releaseScript removes a lease; removing one already gone does nothing.
// KEYS: the sets. ARGV: member, cost. Returns how many members it removed.
var releaseScript = redis.NewScript(`
local member, cost = ARGV[1], tonumber(ARGV[2])
local n = 0
for j0 = 1, cost, 1000 do
  local members = {}
  for j = j0, math.min(cost, j0 + 999) do
    members[#members + 1] = (j == 1) and member or (member .. '#' .. j)
  end
  for _, k in ipairs(KEYS) do
    n = n + redis.call('ZREM', k, unpack(members))
  end
end
return n
`)

// renewScript pushes back the expiry of leases still present, and never
// brings back one that is gone. KEYS: the sets the leases share. ARGV: TTL
// in ms, then member and cost pairs. Returns the members that were gone.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local gone = {}
for i = 2, #ARGV, 2 do
  local member, cost = ARGV[i], tonumber(ARGV[i + 1])
  for _, k in ipairs(KEYS) do
    local s = redis.call('ZSCORE', k, member)
    if s and tonumber(s) > now then
      redis.call('ZADD', k, 'XX', now + ttl, member)
      for j = 2, cost do redis.call('ZADD', k, 'XX', now + ttl, member .. '#' .. j) end
    elseif k == KEYS[1] then
      gone[#gone + 1] = member
    end
  end
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return gone
`)

// which says which limit the set at index i of keys counts (per key first).
func (r *RedisLayer) which(keys []string, i int) which {
	if keys[i] == r.allKey {
		return allLimit
	}
	return keyLimit
}

// Acquire admits req if the fleet's leases leave room for its units. When
// Redis errs or is slower than RedisConfig.Timeout, it decides from this
// instance's share instead and marks the lease (or rejection) Fallback. If
// ctx ends while the script runs, Acquire returns ctx's error, and a lease
// the script may have added is removed by the renewer.
func (r *RedisLayer) Acquire(ctx context.Context, req shed.Request) (shed.Lease, error) {
	if err := ctx.Err(); err != nil {
		return shed.Lease{}, fmt.Errorf("concurrency: request gone before acquiring: %w", err)
	}
	if r.gate.Down() && !r.gate.Try(r.clock.Now().UnixNano()) {
		return r.acquireLocal(ctx, req)
	}
	cost := req.Units()
	if over := r.neverFits(cost); over != none {
		// It can never fit, and its members would only burden Redis. Dry
		// run admits it with nothing held.
		if r.enf.DryRun {
			ls := shed.NewLease(r)
			ls.Cost, ls.DryRun = cost, true
			return ls, nil
		}
		return shed.Lease{}, r.rejection(req, over, 0)
	}
	keys := make([]string, 0, 2)
	bounds := make([]int64, 0, 2)
	if k := r.KeyFor(req); k != "" {
		keys, bounds = append(keys, k), append(bounds, r.perKey)
	}
	if r.allKey != "" {
		keys, bounds = append(keys, r.allKey), append(bounds, r.limit)
	}
	seq := r.seq.Add(1)
	e := &redisLease{owner: r, seq: seq, member: r.instance + ":" + strconv.FormatUint(seq, 36), keys: keys, cost: cost}

	res, err := r.run(ctx, e, bounds)
	if err != nil {
		return r.failed(ctx, req, e, err)
	}
	if res[0] == 1 {
		if r.enf.Mode == shed.Soft {
			r.epAll.End()
			if ep := r.keyEpisode(req); ep != nil {
				ep.End()
			}
		}
		return r.lease(e, res), nil
	}
	// Over a limit: let the mode decide, and ask Redis again with the bound
	// it allows.
	over := r.which(keys, int(res[1])-1)
	n := res[2]
	limit, ep := r.limit, &r.epAll
	if over == keyLimit {
		limit, ep = r.perKey, r.keyEpisode(req)
	}
	now := r.clock.Now()
	v := r.enf.Decide(now, false, n <= r.enf.Ceiling(limit)-cost, ep)
	if v == shed.AdmitOver || v == shed.AdmitDryRun {
		for i := range bounds {
			if v == shed.AdmitOver {
				bounds[i] = r.enf.Ceiling(bounds[i])
			} else {
				bounds[i] = 1 << 50
			}
		}
		res, err = r.run(ctx, e, bounds)
		if err != nil {
			return r.failed(ctx, req, e, err)
		}
		if res[0] == 1 {
			ls := r.lease(e, res)
			ls.Over, ls.DryRun = v == shed.AdmitOver, v == shed.AdmitDryRun
			return ls, nil
		}
		over, n = r.which(keys, int(res[1])-1), res[2]
		if v = r.enf.Decide(now, false, false, nil); v == shed.AdmitDryRun {
			// Over a ceiling in dry run: still never reject.
			for i := range bounds {
				bounds[i] = 1 << 50
			}
			if res, err = r.run(ctx, e, bounds); err != nil {
				return r.failed(ctx, req, e, err)
			}
			ls := r.lease(e, res)
			ls.DryRun = true
			return ls, nil
		}
	}
	return shed.Lease{}, r.rejection(req, over, n)
}

// neverFits says which limit a request of this cost exceeds even at its
// ceiling, if any.
func (r *RedisLayer) neverFits(cost int64) which {
	switch {
	case r.perKey > 0 && cost > r.enf.Ceiling(r.perKey):
		return keyLimit
	case r.limit > 0 && cost > r.enf.Ceiling(r.limit):
		return allLimit
	}
	return none
}

// keyEpisode returns the soft-mode overage episode of req's key. It lives in
// the fallback limiter's slot for the key, so soft episodes are tracked per
// instance; nil without a per-key limit or outside soft mode.
func (r *RedisLayer) keyEpisode(req shed.Request) *shed.Episode {
	if r.enf.Mode != shed.Soft || r.local.keys == nil {
		return nil
	}
	return &r.local.keys.get(r.local.key(&req)).ep
}

func (r *RedisLayer) rejection(req shed.Request, over which, n int64) *shed.Rejection {
	if over == keyLimit {
		q := shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-n), Service: r.keyBy == KeyByRoute}
		if r.keyBy == KeyByClient {
			return shed.Throttled("too many requests in flight for this client", r.retryAfter, q)
		}
		return shed.Shed("too many requests in flight for this route", r.retryAfter, q)
	}
	q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-n), Service: true}
	return shed.Shed("too many requests in flight", r.retryAfter, q)
}

// run runs the acquire script within the timeout. Redis answering at all
// ends a fallback.
func (r *RedisLayer) run(ctx context.Context, e *redisLease, bounds []int64) ([]int64, error) {
	args := make([]any, 0, 3+len(bounds))
	args = append(args, e.member, e.cost, r.ttl.Milliseconds())
	for _, b := range bounds {
		args = append(args, b)
	}
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	e.expires.Store(r.clock.Now().Add(r.ttl).UnixNano())
	res, err := acquireScript.Run(tctx, r.client, e.keys, args...).Int64Slice()
	cancel()
	if err != nil {
		return nil, err
	}
	if len(res) < 2 || (res[0] == 0 && (len(res) < 3 || res[1] < 1 || res[1] > int64(len(e.keys)))) {
		return nil, fmt.Errorf("concurrency: unexpected reply from the acquire script: %v", res)
	}
	r.gate.Answered()
	return res, nil
}

// failed handles an acquire whose script did not answer: the caller went
// away (its error is returned), or Redis erred or was slow (the local share
// decides). Either way the script may have added the lease, so it is queued
// for removal.
func (r *RedisLayer) failed(ctx context.Context, req shed.Request, e *redisLease, err error) (shed.Lease, error) {
	r.forget(e)
	if ctx.Err() != nil {
		return shed.Lease{}, fmt.Errorf("concurrency: request gone while acquiring: %w", ctx.Err())
	}
	if redisgate.IsOutage(err) {
		r.gate.Failed(r.clock.Now().UnixNano())
	}
	// Redis is down, slow, or refused this one request (an error reply):
	// either way the local share decides it.
	return r.acquireLocal(ctx, req)
}

// acquireLocal decides from this instance's share of the limits.
func (r *RedisLayer) acquireLocal(ctx context.Context, req shed.Request) (shed.Lease, error) {
	in, err := r.local.Acquire(ctx, req)
	if err != nil {
		var rej *shed.Rejection
		if errors.As(err, &rej) {
			rej.Fallback = true
		}
		return shed.Lease{}, err
	}
	ls := shed.NewLease(r)
	ls.Ref, ls.ID, ls.Cost, ls.Acquired = in.Ref, in.ID, in.Cost, in.Acquired
	ls.Quota, ls.Waited, ls.Over, ls.DryRun = in.Quota, in.Waited, in.Over, in.DryRun
	ls.Fallback = true
	return ls, nil
}

func (r *RedisLayer) lease(e *redisLease, counts []int64) shed.Lease {
	r.mu.Lock()
	r.held[e] = struct{}{}
	r.mu.Unlock()
	ls := shed.NewLease(r)
	ls.Ref, ls.ID, ls.Cost = e, e.seq, e.cost
	// Remaining from the tightest set (counts[i+1] is set i after adding).
	ls.Quota = shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: -1, Service: true}
	for i, k := range e.keys {
		if i+1 >= len(counts) {
			break
		}
		q := shed.Quota{Policy: PolicyOverall, Limit: r.limit, Remaining: max(0, r.limit-counts[i+1]), Service: true}
		if k != r.allKey {
			q = shed.Quota{Policy: r.keyPolicy, Limit: r.perKey, Remaining: max(0, r.perKey-counts[i+1]), Service: r.keyBy == KeyByRoute}
		}
		if ls.Quota.Remaining < 0 || q.Remaining < ls.Quota.Remaining {
			ls.Quota = q
		}
	}
	return ls
}

// Release removes the lease from Redis (or gives back the local share, for
// a lease granted while falling back). If Redis does not confirm, the
// renewer retries until the lease would have expired anyway. A lease this
// limiter did not grant, or already released, is ignored.
func (r *RedisLayer) Release(lease *shed.Lease, o shed.Outcome) {
	e, ok := lease.Ref.(*redisLease)
	if !ok {
		r.local.Release(lease, o)
		return
	}
	if e.owner != r || !e.released.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	delete(r.held, e)
	r.mu.Unlock()
	if r.async || r.gate.Down() {
		// Batched, or Redis is not answering: do not make the request wait.
		r.retryLater(e)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	err := releaseScript.Run(ctx, r.client, e.keys, e.member, e.cost).Err()
	cancel()
	if err != nil {
		r.retryLater(e)
	}
}

// forget queues the removal of a lease whose acquire may or may not have
// reached Redis.
func (r *RedisLayer) forget(e *redisLease) {
	e.released.Store(true)
	r.mu.Lock()
	e.recheck = true
	r.mu.Unlock()
	r.retryLater(e)
}

// flushSoon is how long after a failed release or an unanswered acquire
// the clean-up first runs, off the request path. The renewer's ticks retry
// what it leaves.
const flushSoon = 5 * time.Millisecond

func (r *RedisLayer) retryLater(e *redisLease) {
	r.mu.Lock()
	r.pending = append(r.pending, e)
	if !r.soon && !r.closed {
		r.soon = true
		r.clock.AfterFunc(flushSoon, r.flushNow)
	}
	r.mu.Unlock()
}

func (r *RedisLayer) flushNow() {
	r.mu.Lock()
	r.soon = false
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.timeout, 100*time.Millisecond))
	defer cancel()
	_ = r.flush(ctx)
}

// tick is the renewer: every RenewEvery it retries unconfirmed releases and
// renews every lease held, each batch in one pipelined round trip.
func (r *RedisLayer) tick() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.renewEvery/2, r.timeout))
	r.flush(ctx)
	r.renew(ctx)
	cancel()
	r.mu.Lock()
	if !r.closed {
		r.timer = r.clock.AfterFunc(r.renewEvery, r.tick)
	}
	r.mu.Unlock()
}

// flush retries the releases Redis has not confirmed, dropping those whose
// lease has expired by now anyway.
func (r *RedisLayer) flush(ctx context.Context) error {
	r.mu.Lock()
	todo := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	calls := make([]evalCall, len(todo))
	for i, e := range todo {
		calls[i] = evalCall{keys: e.keys, args: []any{e.member, e.cost}}
	}
	cmds := r.evalAll(ctx, releaseScript, calls)
	now := r.clock.Now().UnixNano()
	var keep []*redisLease
	var err error
	failed := 0
	r.mu.Lock()
	for i, c := range cmds {
		e := todo[i]
		switch {
		case c.Err() != nil:
			if now < e.expires.Load() {
				keep = append(keep, e)
				failed++
				err = c.Err()
			}
		case e.recheck:
			e.recheck = false
			keep = append(keep, e)
		}
	}
	r.pending = append(r.pending, keep...)
	r.mu.Unlock()
	if failed > 0 {
		return fmt.Errorf("concurrency: %d releases not confirmed by Redis: %w", failed, err)
	}
	return nil
}

type evalCall struct {
	keys []string
	args []any
}

// evalAll runs one script for each call in one pipeline. If Redis has lost
// the script (a restart flushes its cache) it loads it and runs the
// pipeline once more.
func (r *RedisLayer) evalAll(ctx context.Context, s *redis.Script, calls []evalCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	for attempt := 0; ; attempt++ {
		pipe := r.client.Pipeline()
		for i, c := range calls {
			cmds[i] = s.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
		noScript := false
		for _, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				noScript = true
				break
			}
		}
		if !noScript || attempt == 1 || s.Load(ctx, r.client).Err() != nil {
			return cmds
		}
	}
}

// renewBatch is the most leases one renew script call carries.
const renewBatch = 256

// renew pushes back the expiry of every lease held, grouped by the sets
// they live in, in one pipeline.
func (r *RedisLayer) renew(ctx context.Context) {
	r.mu.Lock()
	if len(r.held) == 0 {
		r.mu.Unlock()
		return
	}
	groups := make(map[string][]*redisLease)
	for e := range r.held {
		g := strings.Join(e.keys, "\n")
		groups[g] = append(groups[g], e)
	}
	r.mu.Unlock()
	expires := r.clock.Now().Add(r.ttl).UnixNano()
	var calls []evalCall
	var batches [][]*redisLease
	for _, ls := range groups {
		for len(ls) > 0 {
			n := min(len(ls), renewBatch)
			batch := ls[:n]
			ls = ls[n:]
			args := make([]any, 0, 1+2*len(batch))
			args = append(args, r.ttl.Milliseconds())
			for _, e := range batch {
				args = append(args, e.member, e.cost)
			}
			calls = append(calls, evalCall{keys: batch[0].keys, args: args})
			batches = append(batches, batch)
		}
	}
	cmds := r.evalAll(ctx, renewScript, calls)
	for i, c := range cmds {
		gone, err := c.StringSlice()
		if err != nil {
			continue
		}
		lost := make(map[string]bool, len(gone))
		for _, m := range gone {
			lost[m] = true
		}
		r.mu.Lock()
		for _, e := range batches[i] {
			if lost[e.member] {
				if _, ok := r.held[e]; ok {
					delete(r.held, e)
					r.stats.lost.Add(1)
				}
				continue
			}
			e.expires.Store(expires)
		}
		r.mu.Unlock()
	}
}

// Renew renews every lease held and retries unconfirmed releases now,
// instead of at the next tick of the renewer.
func (r *RedisLayer) Renew(ctx context.Context) error {
	err := r.flush(ctx)
	r.renew(ctx)
	return err
}

// Close stops the renewer and retries unconfirmed releases once. Leases
// still held stop being renewed and expire after the TTL: release them
// first. The client is not closed.
func (r *RedisLayer) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.timeout, time.Second))
	defer cancel()
	if err := r.flush(ctx); err != nil {
		return err
	}
	return r.flush(ctx) // the second removal of unanswered acquires
}
