// Package ratelimit is the request-rate layer of loadshed: five rate-limiting
// algorithms, an in-memory store (the default) and a Redis store, rules that
// key limits per client, per route or per descriptor, and the shed.Layer
// that enforces them.
//
// The shortest use is PerKey, a token bucket per client key:
//
//	r.Use(shedhttp.Limit(ratelimit.PerKey(100, time.Minute)))
//
// Beyond it: build a Store for each limit (NewMemory, or NewRedis for a
// fleet), name a Rule for each (what it counts per: ByClient, ByRoute, By,
// RouteIs), and give the rules to New. Config.Name tells two
// rate-limit layers apart in events and metrics.
//
// # Algorithms
//
// Every algorithm takes a Limit (Quantity units per Period, and a Burst for
// the buckets) and a cost per request, and reports a Result: allowed, the
// limit, remaining units, retry-after and reset-after, the figures behind
// the RateLimit headers, exact for the algorithm:
//
//   - TokenBucket: refills continuously at Quantity/Period up to Burst.
//   - LeakyBucket: GCRA, the leaky bucket as a meter. It makes the same
//     decisions as the token bucket (GCRA is the token bucket kept as one
//     instant, the theoretical arrival time); with the queue action it
//     shapes a key's traffic to a constant outflow.
//   - FixedWindow: a count per Period-long window aligned on the Unix
//     epoch. Cheapest; admits up to twice the quantity across a window edge.
//   - SlidingLog: the instant of every admitted request within the last
//     Period (at most Quantity entries per key, Quantity at most
//     MaxSlidingLogQuantity). Exact over any Period.
//   - SlidingWindow: the current window's count plus the previous one's
//     weighted by its overlap with the last Period, rounded up. Cheap and
//     close to the log on ordinary traffic, but its worst case is twice
//     Quantity in one rolling Period (the previous window's units all at
//     its end); docs/redis.md gives the measured error.
//
// The buckets' emission interval Period/Quantity is rounded up to a whole
// nanosecond, so rounding never admits more than the limit. A cost above
// what the limit can ever admit (Limit.MaxCost) is ErrCostAboveBurst, an
// empty key ErrEmptyKey, a cost below 1 ErrInvalidCost: errors, never
// panics. Peek reads what one more unit would meet without counting it (on
// Redis, one round trip that writes nothing).
//
// The contract suite (contract_test.go) runs step tables at fixed instants
// over every algorithm and every store, so the stores agree to the
// nanosecond.
//
// # The in-memory store
//
// NewMemory returns a Store for one algorithm and one limit. Keys live in
// shards, each an open-addressing table that holds every key's state inline
// next to the key's hash, read without a lock: a decision is a hash, a
// probe, and a compare-and-swap on one word (the buckets) or a lock of the
// key's own (the windows and the log), so parallel decisions share no lock
// across keys and a decision on a key already held allocates nothing. Time
// is read from the monotonic clock (or an injected shed.Clock in tests).
//
// Memory is bounded by MemoryConfig.MaxKeys: a new key at a full shard
// evicts a key at rest if it finds one, else an arbitrary key of that shard.
// One sweeper per store (a self-rearming timer, stopped by Close) removes
// keys that have been at rest for IdleAfter; a key at rest is exactly a new
// key, so sweeping changes no decision.
//
// Keys are held as seeded 64-bit hashes, so a key's length costs nothing.
// Heap per key, measured with 100k keys (Go 1.26, amd64; see
// TestMemoryBytesPerKey and BenchmarkMemoryBytesPerKey), and the same at
// MaxKeys 100k after 400k distinct keys, each new one evicting another
// (TestMemoryChurnAtCap): token and leaky bucket 42 bytes, fixed window 84,
// sliding window 105, sliding log 253 with one request in its log, plus 16
// bytes per further entry (at most Quantity). Tables are kept between a
// quarter and half full of keys, so the figure moves with the number of
// keys: 32 to 64 bytes for the buckets, 64 to 128 for the fixed window, 80
// to 160 for the sliding window, about 210 to 350 for the log. A store at
// its cap keeps the table of its live keys: evicted keys' slots are
// reclaimed by rebuilding at the same size.
//
// # Rules and the layer
//
// A Rule names a limit, the Store that enforces it, and the Descriptors
// it counts per, the way envoyproxy/ratelimit reads: a domain and key/value
// entries (the client key, the route, or any value a function draws from
// the request's context, such as a client IP or a user). New holds
// several rules; a request must pass every rule that applies to it, and a
// request one rule rejects is not charged by the others (their units are
// refunded). Rule keys are length-prefixed and escaped, so different values
// never share a key, hold no byte significant to Redis, and are digested
// when longer than MaxRuleKeyBytes.
//
// The layer applies shed.Enforcement: hard; soft (up to
// Enforcement.Ceiling for at most OverageFor per episode of each rule key,
// Lease.Over set; a request over several rules needs every one's episode
// to allow it, and see layerkit.Episode for when an episode begins); elastic
// (the same while the Headroom signal allows, with no time limit); dry run
// (never rejects, Lease.DryRun set; a request let through in dry run is
// charged by no rule). Over the limit it rejects with a 429 shed.Rejection
// carrying RetryAfter and the violated policy, or queues the request (per
// key, highest priority first, within MaxWait and the request's deadline;
// when the layer's MaxLength waiters are queued, a newcomer evicts the
// lowest-priority waiter below its own priority, on any key) until
// capacity returns. A request that times out in the queue gets the
// RetryAfter of that moment. The lease carries the quota
// of the rule closest to exhaustion (Lease.Quota) and, when several rules
// admitted the request, lists every one (Lease.Quotas), so that the
// RateLimit fields name each policy that applies on every response. Releasing it
// with shed.Unused (a later layer rejected the request) refunds its units.
//
// A Store error never becomes a 500: the request is admitted with
// Lease.Fallback set, the chain's observer records the fallback, and
// Config.OnError is told.
package ratelimit
