// Package bench compares loadshed with its peers in the same run, on the
// same machine and the same redis-server. It is a module of its own so that
// the peers never enter the library's go.mod.
//
// The peers, and how each is driven, are in the adapters of this package:
//
//   - rate limiters in memory (RatePeers): golang.org/x/time/rate (one
//     Limiter, and a sharded map of one Limiter per key), go-chi/httprate
//     (RateLimiter.OnLimit), sethvargo/go-limiter's memorystore and
//     uber-go/ratelimit (blocking Take, allow rows of one hot key only);
//   - rate limiters on Redis (RedisPeers): go-redis/redis_rate, with a
//     go-redis hook (RoundTrips) counting round trips per decision;
//   - concurrency limiters: chi's middleware.Throttle (through HTTP) and
//     golang.org/x/sync/semaphore. platinummonkey/go-concurrency-limits is
//     not on the module proxy and is not compared.
//
// The rate limit service is compared with envoyproxy/ratelimit, the
// service it replaces, by bench/rls-compare.sh and cmd/rlscompare: the
// same requests to both, answers compared one by one, then the same load.
//
// cmd/pollprobe measures no peer: how long a Go server whose one P is kept
// busy takes to notice a request: a bound on the CPU-bound scenarios of
// docs/overload.md.
//
// The tests check that every adapter enforces the same limit the same way
// (each admits exactly N of N+k requests); the benchmarks measure. Run them
// all with scripts/bench.sh, which writes docs/results/benchmarks.md
// (docs/benchmarks.md explains it).
package bench
