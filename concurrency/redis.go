package concurrency

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// RedisLayer limits requests in flight across a fleet: each admitted
// request is a lease in a Redis sorted set scored by its expiry, renewed in
// batches while it runs, removed when it ends, and dropped by Redis after
// RedisConfig.TTL if its host dies. When Redis errs or is slow it decides
// from this instance's share of the limits, and goes back to Redis as soon
// as Redis answers. It implements shed.Layer and shed.Releaser and is safe
// for concurrent use. Close stops its renewer.
//
// The files: redis_config.go (RedisConfig), redis_acquire.go (admission),
// redis_lease.go (release, renewal, clean-up of leases Redis may hold),
// redis_fallback.go (the local share), lua/ (the scripts).
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
	keys       redisx.Keys
	ttl        time.Duration
	renewEvery time.Duration
	timeout    time.Duration
	deadlines  *redisx.Deadlines
	async      bool
	instance   string // this instance's random id, the first part of every member
	allKey     string // the overall sorted set; "" without an overall limit

	// The fallback: this instance's share of the limits among expected
	// (when set) or counted instances, rebuilt when the count moves.
	localCfg Config
	expected int
	presence *redisx.Presence
	leave    func()
	local    atomic.Pointer[localShare]
	oldMu    sync.Mutex
	old      []*Layer // shares replaced, for the leases they granted

	seq atomic.Uint64
	// gate keeps requests off Redis after an outage, but for one probe per
	// ProbeInterval; the layers on one client share it.
	gate        *redisx.Gate
	releaseGate func()
	epAll       layerkit.Episode

	mu      sync.Mutex
	held    map[*redisLease]struct{} // leases to renew
	pending []*redisLease            // removals Redis did not confirm, retried by the renewer
	timer   shed.Timer
	soon    bool // a prompt flush of pending is scheduled
	closed  bool

	// flushing holds a token while a flush of pending runs.
	flushing chan struct{}
	// background counts the renewer's ticks and prompt flushes under way,
	// added under mu while not closed: Close waits for them, so that none
	// uses the client once it has returned.
	background sync.WaitGroup

	stats redisStats
}

type redisStats struct {
	lost atomic.Int64
}

// NewRedis checks cfg and returns a fleet-wide limiter on client, with its
// renewer running. client may be a *redis.Client, a *redis.ClusterClient
// or any redis.UniversalClient; it must have ContextTimeoutEnabled set
// (see RedisConfig.Timeout). The client stays the caller's: Close does not
// close it.
func NewRedis(client redis.UniversalClient, cfg RedisConfig) (*RedisLayer, error) {
	var cerr error
	if err := redisx.CheckClient(client); err != nil {
		cerr = fmt.Errorf("concurrency: NewRedis: %w", err)
	}
	if err := cfg.Validate(); err != nil || cerr != nil {
		return nil, joinErrs(cerr, err)
	}
	cfg = cfg.withDefaults()
	// Validates the per-instance parts (name, key mode, enforcement) once.
	probe, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	id, err := instanceID()
	if err != nil {
		return nil, err
	}
	r := &RedisLayer{
		name:       probe.name,
		keyBy:      cfg.KeyBy,
		keyPolicy:  probe.keyPolicy,
		limit:      cfg.Limit,
		perKey:     cfg.PerKey,
		enf:        cfg.Enforcement,
		clock:      probe.clock,
		retryAfter: probe.retryAfter,
		client:     client,
		keys:       redisx.NewKeys(cfg.Prefix),
		ttl:        cfg.TTL,
		renewEvery: cfg.RenewEvery,
		timeout:    cfg.Timeout,
		deadlines:  redisx.NewDeadlines(cfg.Timeout),
		async:      cfg.AsyncRelease,
		instance:   id,
		localCfg:   cfg.Config,
		expected:   cfg.ExpectedInstances,
		held:       make(map[*redisLease]struct{}),
		flushing:   make(chan struct{}, 1),
	}
	r.gate, r.releaseGate = redisx.SharedGate(client, r.clock, cfg.ProbeInterval)
	if r.limit > 0 {
		r.allKey = r.keys.Fixed("leases")
	}
	if r.expected == 0 {
		r.presence, r.leave = redisx.JoinPresence(client, r.keys.Fixed(redisx.PresenceName), 0)
	}
	r.mu.Lock()
	r.timer = r.clock.AfterFunc(r.renewEvery, r.tick)
	r.mu.Unlock()
	return r, nil
}

// Name returns the layer's name.
func (r *RedisLayer) Name() string { return r.name }

// ReadsRoute reports whether the layer reads Request.Route: with KeyByRoute
// (shed.RouteReader).
func (r *RedisLayer) ReadsRoute() bool { return r.keyBy == KeyByRoute }

// localLimiter returns the limiter that decides, with this instance's share of the
// limits, while Redis does not answer; nil when every share rounds to 0.
func (r *RedisLayer) localLimiter() *Layer { return r.share().lim }

// Instances returns the instances the outage share divides by now:
// RedisConfig.ExpectedInstances when set, else the live instances last
// counted in Redis (1 before any count).
func (r *RedisLayer) Instances() int {
	counted := 0
	if r.presence != nil {
		counted = r.presence.Count()
	}
	return redisx.Instances(r.expected, counted)
}

// Fallback reports whether the limiter is deciding locally now because
// Redis did not answer.
func (r *RedisLayer) Fallback() bool { return r.gate.Down() }

// Held returns how many leases this instance holds in Redis (and renews):
// its requests in flight fleet-wide, read without asking Redis.
func (r *RedisLayer) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// InFlight returns the units this instance's requests hold: in Redis, and
// in the local share for those admitted while falling back.
func (r *RedisLayer) InFlight() int64 {
	r.mu.Lock()
	var n int64
	for e := range r.held {
		n += e.cost
	}
	r.mu.Unlock()
	if l := r.localLimiter(); l != nil {
		n += l.InFlight()
	}
	return n
}

// Queued returns the requests waiting: always 0, as the Redis limiter
// never queues (RedisConfig refuses the Queue action).
func (r *RedisLayer) Queued() int { return 0 }

// Pending returns how many leases wait to be removed from Redis: releases
// Redis has not confirmed, and acquires that ended without an answer (their
// script may have added the lease). The renewer retries them.
func (r *RedisLayer) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Lost returns how many leases expired in Redis while their request still
// ran (renewals failed for longer than the TTL).
func (r *RedisLayer) Lost() int64 { return r.stats.lost.Load() }

// Fallbacks returns how many outages the limiter's gate began (shared with
// the other layers on the same client).
func (r *RedisLayer) Fallbacks() int64 { return r.gate.Outages() }

// keyFor returns the sorted set that counts req's key (its Request.Key or
// Request.Route), or "" without a per-key limit. The key appears as its
// SHA-256 digest, so nothing a client sends can leave the prefix. With an
// overall limit every key shares the hash tag of the overall set, since one
// script updates both; otherwise each key has its own tag so that keys
// spread over a Cluster.
func (r *RedisLayer) keyFor(req shed.Request) string {
	if r.perKey == 0 {
		return ""
	}
	k := req.Key
	if r.keyBy == KeyByRoute {
		k = req.Route
	}
	if r.allKey != "" {
		return r.keys.In("leases", "key", k)
	}
	return r.keys.Key("leases:key", k)
}

// overallKey returns the sorted set that counts every request, or "" without
// an overall limit.
func (r *RedisLayer) overallKey() string { return r.allKey }

// Close stops the renewer and removes from Redis every lease this instance
// holds or may have left there (unconfirmed releases, unanswered
// acquires), so that its slots are free for the fleet at once rather than
// after the TTL. Requests still running stop counting fleet-wide: close
// after they end. The client is not closed.
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
	for e := range r.held {
		delete(r.held, e)
		if e.released.CompareAndSwap(false, true) {
			r.pending = append(r.pending, e)
		}
	}
	r.mu.Unlock()
	r.background.Wait()
	if r.leave != nil {
		r.leave()
	}
	defer r.releaseGate()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.timeout, time.Second))
	defer cancel()
	if err := r.flush(ctx); err != nil {
		return err
	}
	return r.flush(ctx) // the second removal of unanswered acquires
}

// ReportGauges reports this instance's units in flight (in Redis and in
// the local share), the fleet-wide overall limit (0 without one), whether it
// is falling back, and the instances the outage share divides by. It reads
// no Redis.
func (r *RedisLayer) ReportGauges(emit func(layerkit.Gauge)) {
	fallback := 0.0
	if r.Fallback() {
		fallback = 1
	}
	emit(layerkit.Gauge{Layer: r.name, Name: layerkit.GaugeInFlight, Value: float64(r.InFlight())})
	emit(layerkit.Gauge{Layer: r.name, Name: layerkit.GaugeLimit, Value: float64(r.limit)})
	emit(layerkit.Gauge{Layer: r.name, Name: layerkit.GaugeFallback, Value: fallback})
	emit(layerkit.Gauge{Layer: r.name, Name: layerkit.GaugeInstances, Value: float64(r.Instances())})
}
