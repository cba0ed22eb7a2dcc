// Package bench compares loadshed with its peers (golang.org/x/time/rate,
// go-chi/httprate, sethvargo/go-limiter, uber-go/ratelimit,
// go-redis/redis_rate, chi's Throttle, platinummonkey/go-concurrency-limits)
// in the same run. It is a module of its own so that the peers never enter
// the library's go.mod.
package bench
