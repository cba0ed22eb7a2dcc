// Package fleet is the fleet-usage load shedder: a shed.Layer that keeps
// the requests in flight across a whole fleet of instances within a
// ceiling per priority, so that lower priorities can never take the
// capacity reserved for higher ones. A request whose priority is over its
// ceiling gets 503 (shed.Shed: "temporary-reduced-capacity") with a
// Retry-After of about one interval, or waits in a layerkit.WaitQueue,
// highest priority first.
//
//	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	usage, err := fleet.New(fleet.Config{Client: client, Capacity: 2000, Interval: fleet.DefaultInterval})
//	defer usage.Close()
//	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight, usage}})
//
// # Ceilings
//
// Capacity is a number of units in flight (shed.Request.Cost, 1 per
// request by default) fleet-wide: Config.Capacity, or Config.PerInstance ×
// the live instances. Each priority has a ceiling, a share of capacity
// that it and every priority below it may use together (defaults:
// critical 100%, default 80%, sheddable 60%, test-mode 10%). The ceilings
// nest: with default work at 80%, a sheddable request is refused although
// sheddable work holds nothing, because admitting it would push the
// requests at or below default over 80%; critical work keeps the last 20%
// to itself. A request of priority p is admitted only if every ceiling
// from p up to critical still holds with its cost added.
//
// # Counting: no Redis on the request path
//
// Each instance counts its own units in flight by priority with atomics.
// Every Config.Interval (100ms by default, down to 10ms) a background tick
// runs one Lua script on three keys sharing one hash tag
// ("{<Prefix>:usage}:entries", ":expiry", ":totals"; Cluster-safe): it
// publishes this instance's counts, drops the entries of instances that
// stopped publishing, and returns the fleet's totals and the number of
// live instances. Entries expire by the Redis server's clock, Config.TTL
// (2 intervals by default) after their last publish, so a crashed
// instance's counts leave the totals within 3 intervals. Totals are kept
// incrementally, so a tick costs O(log N) in the number of instances, and
// Redis sees instances ÷ Interval scripts per second whatever the request
// rate. Close removes the instance's entry at once.
//
// Between ticks, Acquire and Release touch only this instance's atomics.
// At each tick the instance works out, for every ceiling C (in units) of
// the N live instances, its allowance until the next tick:
//
//	A = P + ⌊(C − F) ÷ N⌋
//
// where P is what it just published at or below that priority and F the
// fleet's total at or below it: its own count plus an N-th of the room
// left (or less an N-th of the excess). A request is admitted while this
// instance's own count, now, stays within A. When every instance computed
// A from the same entries, the allowances sum to C less the remainder of
// (C − F) ÷ N: fewer than N units of a ceiling can stay unused, and a
// ceiling of fewer units than there are live instances admits nothing at
// all (give such a priority a larger share, or the fleet a larger
// capacity). While the fleet is full (less than one unit of room per
// instance), an instance above its fair share (C ÷ N, rounded up) also
// gives back half of its excess at each tick, so that capacity does not
// stay with whoever took it first: an instance that joins a saturated
// fleet reaches about its share within a few dozen ticks.
//
// The count is split into stripes, so that cores admitting at once do not
// all write one cache line: about one stripe per P (a sync.Pool hands them
// out), each holding credit, a part of A it may admit against on its own.
// When a stripe's credit runs out, a slow path under a lock judges the
// instance's whole count against A, takes back other stripes' unused
// credit if it must, and gives the stripe more; a request over A is
// refused without the lock. The decisions are those of a single counter:
// credit is only given out of what A leaves, and a tick that lowers A
// below what is held takes every stripe's credit back.
//
// # The error bound
//
// The totals an instance decides on are up to one interval old, so the
// fleet can overshoot a ceiling. Let U be the fleet's true usage at or
// below some priority and C its ceiling. Each instance k holds at most its
// allowance A_k (or what it held at its tick, if that was more: it then
// admits nothing), so
//
//	U ≤ Σ A_k = C + Σ_j (P_j − mean_k P_j⁽ᵏ⁾)
//
// where P_j is instance j's latest entry and P_j⁽ᵏ⁾ the entry of j that
// instance k read at its last tick. Each P_j⁽ᵏ⁾ is j's latest or the one
// before it, so each term is at most what j's count grew between two of
// its publishes:
//
//	overshoot ≤ Σ_j growth of j in one interval
//	          ≤ the units the fleet admitted at or below that priority
//	            within one interval (plus a tick's latency)
//
// and, since an instance grows between ticks by at most ⌊(C − F) ÷ N⌋,
// never more than C − F ≤ C in all: the fleet never holds more than twice
// a ceiling, where instances that each took all the room they saw could
// reach N times it. In steady overload, when instances replace the work
// they finish, the growth and so the overshoot are small: it comes from
// ticks that run late, while the others take room a late instance already
// claimed. Measured against a real redis-server
// (TestRedisFleetUnderMixedLoad: 3 instances with their own clients,
// capacity 40, 50ms interval, mixed-priority closed-loop load of 2–8ms
// requests, the fleet's true usage sampled every millisecond): the
// largest overshoot of the default ceiling (32 units) was 9 to 10 units in
// three runs, of sheddable's (24) 0 to 3, against bounds at those
// instants of about 300 and 100 units; critical requests, with 8 units
// reserved, were refused 0 to 2 times in about 600. The machine was
// shared (load average about 20 on 2 cores), so ticks ran late; the test
// logs its figures and checks every sample against the bound over a
// window of two intervals.
//
// # Redis slow or gone
//
// A tick that fails or takes longer than Config.Timeout (default
// Interval/2, at most 50ms) puts the layer in fallback: it decides from
// this instance's own counts against its share of each ceiling, capacity
// ÷ the live instances the last good tick counted, rounded down (so the
// fleet as a whole stays within capacity), and marks leases, rejections
// and Stats as fallback; it starts from the allowance of the last good
// tick where that was smaller. Ticks keep trying every interval, and the
// first that succeeds puts the layer back on fleet totals; on a Redis
// Cluster a failed tick has the client reload its slot map, so that the
// tick after a failover goes to the promoted replica. A request never waits
// on Redis. After a long outage, go-redis itself may refuse to dial for up
// to a second once PoolSize dials in a row have failed (its pool's dial
// breaker), which can delay the return by as much.
//
// # Modes
//
// Config.Enforcement sets the mode (hard; soft: above a ceiling by its
// overage for at most OverageFor, then no new overage until the ceiling
// has gone unexceeded for OverageCooldown, as layerkit.Episode says; elastic:
// above it while shed.Headroom says the process has room), dry run (decide
// and record, never refuse; an admission over the ceiling counts nothing
// in flight, as a refusal would not) and the
// action on "over" (reject, or queue in a layerkit.WaitQueue that releases and
// ticks wake).
//
// Stats and ReportGauges (layerkit.GaugeReporter: usage and ceiling by
// priority, instances, fallback, in_flight, limit, queued) show the
// layer's state.
package fleet
