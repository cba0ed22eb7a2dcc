// Package concurrency is loadshed's concurrent-request layer: "you can only
// have N requests in progress at the same time". Layer counts in this
// process; RedisLayer counts across a fleet, in Redis. Both implement
// shed.Layer (named by Config.Name, default "concurrency") and
// shed.Releaser, so they plug into a shed.Chain, the HTTP middleware, or
// stand alone.
//
// The shortest use is PerKey, a cap on each client's requests in flight:
//
//	r.Use(shedhttp.Limit(concurrency.PerKey(10)))
//
// # Limits
//
// A Config sets an overall limit (Limit), a per-key limit (PerKey), or both.
// KeyBy says what the per-key limit counts by, and so whose limit it is:
//
//   - KeyByClient counts per Request.Key (the API key, user or client IP). The
//     limit is the client's own: over it, a 429 (shed.Throttled) with
//     policy "in-flight-per-key".
//   - KeyByRoute counts per Request.Route (a route pattern, so the set of keys
//     stays bounded). The limit protects the service: over it, a 503
//     (shed.Shed) with policy "in-flight-per-route".
//
// Over the overall limit a request gets a 503 with policy "in-flight". One
// layer keeps one per-key dimension; to limit per key and per route, chain
// two layers. Cost (Request.Units) counts: a request of cost 3 takes three
// units. Every lease carries the quota with the least room left
// (Lease.Quota), for the RateLimit headers.
//
// Config.Enforcement applies the shed modes through Enforcement.Decide:
// hard never goes above a limit; soft goes above it up to
// Enforcement.Ceiling for at most OverageFor per episode and marks the lease
// Over, where a request over both the per-key and the overall limit needs
// both limits' episodes to allow it (see layerkit.Episode for when an episode
// begins: not again under sustained overload); elastic does the same while
// Enforcement.Headroom has room, with no time limit; dry run admits
// everything and marks what it would have rejected DryRun. Neither the
// local Layer nor the RedisLayer counts a dry-run admission over a limit
// in flight (a rejection would not have been; the RedisLayer's lease holds
// nothing in Redis), so each goes on deciding as if it enforced. With the
// Queue action a request over the overall limit waits in a fair queue
// (layerkit.NewFairQueue: highest priority first, bounded by the queue and
// the request's deadline), and each release wakes the waiter of the client
// that has had the least of the limit, in seat-seconds, within the highest
// priority waiting: one client's flood takes no other client's share, with
// no per-client number (Config.Fairness sets weights or turns it off;
// TopClients and the clients_queued and fair_share gauges show the
// shares; layerkit's documentation, "Fair share", says what a client
// owning many keys gets). A request over a per-key limit is rejected at
// once, since one queue serves one pool of capacity and a waiter stuck on
// its own key would hold up every other.
//
// # The local limiter
//
// Acquire and release take no lock shared by all requests and allocate
// nothing. The overall count is one atomic counter on its own cache line,
// raised by compare-and-swap only when the result stays within the limit,
// so a refused request never disturbs the count. Per-key counters live in a
// map split into 64 shards by a hash of the key: a lookup takes its shard's
// read lock, a miss its write lock once. The lease points at its key's
// counter through a pooled per-grant guard (layerkit.GuardPool), so a release
// needs no lookup, and releasing a copy of a released lease changes nothing.
//
// Counters of keys with nothing in flight are removed when a shard grows
// past twice its live keys (and at least 512), and by Sweep. Removal must
// never race an acquire that found the counter but has not yet raised it,
// or two counters would exist for one key and the key could go over its
// limit. So removal, under the shard's write lock, swaps the count from 0
// to a "dead" mark by compare-and-swap, which fails if an acquire got there
// first; an acquire that finds the mark looks the key up again and makes a
// new counter.
//
// # Never leaking a slot
//
// A lease is released exactly once (shed.Lease.Release ignores a second
// call; a lease this limiter did not grant is ignored). shed.Chain.Do and
// the HTTP middleware release on completion, on error, on a handler panic
// and when the caller goes away. Every path of Acquire that does not return
// a lease leaves nothing taken: a take that fails undoes what it took; a
// queued request that gives up holds nothing, and capacity granted at the
// instant it gives up is handed to the next waiter; a Redis acquire cut
// short by the caller's context or by the timeout queues its lease for
// removal, in case the script ran anyway (below).
//
// # Fleet-wide, on Redis
//
// RedisLayer (NewRedis(client, cfg), the client first as in every
// Redis-backed layer) does what Stripe's concurrent-requests limiter does:
// each request in flight is a lease, a member of a sorted set scored by the
// lease's expiry in Redis's own clock (TIME), so hosts' clocks never matter.
// Acquire is one Lua script (lua/acquire.lua): for each set (the key's,
// then the overall one) drop expired members (ZREMRANGEBYSCORE -inf now),
// then if ZCARD + cost is within the limit ZADD the lease with score
// now+TTL, in every set, and set each key's expiry to at least the TTL. The
// script is idempotent: a lease already present is this same acquire run
// again (go-redis re-sends a script whose reply was lost), refreshed and
// reported admitted, never counted against itself. Release is one script,
// ZREM, which does nothing when the lease is gone already; with
// AsyncRelease, releases are gathered for about 5ms and sent in one
// pipeline, so a request pays one round trip instead of two. A request of
// cost c is c members ("id", "id#2", ...).
//
// Keys, with Prefix p (default "loadshed:cc:", its trailing ':' dropped)
// and d the base64url SHA-256 of the user key (so no key a client sends
// can leave its set or move the hash tag):
//
//	{p:leases}              the overall lease set (with an overall limit)
//	{p:leases}:key:d        a key's lease set, beside an overall limit
//	{p:leases:key:d}        a key's lease set, when there is only a per-key limit
//	{p:presence}            the live instances (see below)
//
// The part in braces is the Redis Cluster hash tag: the sets one script
// touches must share a slot, so with an overall limit every set shares the
// tag {p:leases} (and so one Cluster node); with only per-key limits each
// key has its own tag and keys spread over the Cluster. Every key has a TTL;
// Redis deletes a set when its last member goes.
//
// Leases expire after RedisConfig.TTL (default 10s) unless renewed: that is
// how long the requests of a host that crashed keep counting. While a
// request runs, its instance renews it: one renewer per RedisLayer ticks
// every RenewEvery (default TTL/3; TTL must exceed it), and pushes back the
// expiry of all the leases it holds in one pipelined round trip, one script
// call per set (ZADD XX, so a lease released or expired meanwhile is never
// brought back; a lease found gone is counted by Lost). The same ticks
// retry releases Redis did not confirm.
//
// # When Redis fails
//
// Each Redis call on the request path is bounded by RedisConfig.Timeout
// (default 50ms). The client must have ContextTimeoutEnabled set, or go-redis
// would ignore the bound; NewRedis checks it. When the script errs or times
// out, the request is decided by this instance's share of the limits by a
// local Layer (see Local): each limit ÷ the instances, rounded down, so
// the fleet never admits more than a limit; a share of 0 refuses. The
// instances are RedisConfig.ExpectedInstances when set, else the live
// instances counted in Redis (each keeps a presence refreshed every second;
// docs/redis.md gives the bound). The share counts the leases this
// instance still holds in Redis, and back on Redis the script's bounds are
// lowered by what the share still holds, so an instance alone never holds
// more than a limit across an outage. The lease or rejection is marked Fallback
// and Fallbacks counts the switch. A lease granted in fallback is released
// locally. While falling back, one request every ProbeInterval (default
// 250ms) tries Redis again, and the first answer ends the fallback; the
// others do not wait on Redis at all. The layers on one client share this
// gate, so a request that met a dead Redis in one layer does not wait for
// it again in the next. On a Redis Cluster the gate is kept per master
// node, a TRYAGAIN (the slot migrating) is retried within the timeout and
// is no outage, and every outage has the client reload its slot map, so
// that a failover sends only the dead master's keys to the fallback, and
// only until its replica takes over (docs/redis.md, Redis Cluster).
//
// An acquire that ends without an answer (the caller's context ended, or the
// timeout passed) may still have added its lease: the command can be on the
// wire. Its lease is removed twice: about 5ms later, and again at the
// renewer's next tick, in case the first removal overtook the acquire. A
// removal that Redis does not confirm is retried every ProbeInterval until
// the lease would have expired anyway, so that leases released during an
// outage free their slots as soon as Redis answers again. Close stops the renewer and removes every lease the
// instance holds or may have left (Pending counts those owed).
//
// Adaptive limits and the Queue action are local only: another host's
// release cannot wake a waiter here, and hosts would disagree on a limit
// learned from their own latency.
//
// # Adaptive limit
//
// With Config.Adaptive the overall limit follows the service's latency,
// between Floor and Ceiling, in the manner of the gradient limits of
// Netflix's concurrency-limits. Only Completed and Failed releases are
// samples (latency from Lease.Acquired to the release, on Config.Clock);
// Dropped and Unused say nothing about the service and are ignored. Samples
// are summed with atomics; a window closes when it has lasted Window
// (default 1s) and holds MinSamples (default 10) samples, and the release
// that closes it computes, with mean the window's mean latency and base the
// least window mean seen (the no-load latency):
//
//	gradient = clamp(Tolerance × base / mean, 0.5, 1)
//	target   = limit × gradient + √limit
//	limit    = limit × (1 − Smoothing) + target × Smoothing,  within [Floor, Ceiling]
//
// The √limit term is the queue the limit allows on purpose, so the limit
// keeps probing upward while latency stays at its base. The limit does not
// grow in a window whose peak in flight was under half of it: a limit the
// traffic never came near says nothing. If the limit sits at its Floor for
// three windows in a row with latency still over tolerance, the service got
// slower for good, and base is measured anew.
//
// Convergence band: for a service whose latency is flat up to a knee of K
// requests in flight and grows in proportion past it (a saturated server),
// the mean at limit L > K is base × L/K, so gradient = K/L (Tolerance 1)
// and target = K + √L for any L: the limit moves a fifth of the way to the
// fixed point L = K + √L each window, monotonically, without overshoot. The
// tests run a simulated server on a manual clock and check that, over the
// last 100 windows, the limit stays within [K, K + √K + 2] and within 2 of
// itself (K = 20: 25; K = 50: 57–58; K = 200: 214–215). A Tolerance t moves
// the fixed point to t × K + √L. The baseline is a minimum, so a service
// that gets slower for good but not so slow that the limit reaches its
// floor keeps a limit scaled down by the slowdown.
package concurrency
