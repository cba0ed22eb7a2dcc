package concurrency

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// BenchmarkLocal measures one acquire and its release on the local limiter:
// the work this layer adds to each request. The lease lives in a variable
// reused across iterations, as it lives in a reused shed.Grant in the chain
// and the middleware: a lease released through its Releaser interface
// escapes, so a fresh variable per request would be a heap allocation of
// the caller's, not of the limiter's.
func BenchmarkLocal(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name string
		cfg  Config
	}{
		{"overall", Config{Limit: 1 << 40}},
		{"per-key", Config{PerKey: 1 << 40}},
		{"overall+per-key", Config{Limit: 1 << 40, PerKey: 1 << 40}},
		{"adaptive", Config{Adaptive: &Adaptive{Floor: 1 << 40, Ceiling: 1 << 41}}},
		{"soft-overall+per-key", Config{Limit: 1 << 40, PerKey: 1 << 40, Enforcement: shed.Enforcement{Mode: shed.Soft}}},
	}
	for _, c := range cases {
		l := mustNew(b, c.cfg)
		req := shed.Request{Key: "client-42", Route: "GET /v1/things"}
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			var ls shed.Lease
			var err error
			for b.Loop() {
				if ls, err = l.Acquire(ctx, req); err != nil {
					b.Fatal(err)
				}
				ls.Release(shed.Completed)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var ls shed.Lease
				var err error
				for pb.Next() {
					if ls, err = l.Acquire(ctx, req); err != nil {
						b.Error(err)
						return
					}
					ls.Release(shed.Completed)
				}
			})
		})
	}
}

// BenchmarkLocalManyKeys spreads requests over many keys, as real traffic
// does: the shards' read locks and the keys' counters are then spread too.
func BenchmarkLocalManyKeys(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 100000} {
		l := mustNew(b, Config{Limit: 1 << 40, PerKey: 1 << 40})
		reqs := make([]shed.Request, n)
		for i := range reqs {
			reqs[i] = shed.Request{Key: "client-" + strconv.Itoa(i)}
		}
		b.Run("keys="+strconv.Itoa(n)+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				var ls shed.Lease
				var err error
				for pb.Next() {
					if ls, err = l.Acquire(ctx, reqs[i%n]); err != nil {
						b.Error(err)
						return
					}
					ls.Release(shed.Completed)
					i += 7919
				}
			})
		})
	}
}

// BenchmarkLocalRejected is the cost of saying no.
func BenchmarkLocalRejected(b *testing.B) {
	ctx := context.Background()
	l := mustNew(b, Config{Limit: 1})
	held, _ := l.Acquire(ctx, shed.Request{})
	defer held.Release(shed.Completed)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Acquire(ctx, shed.Request{}); err == nil {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkLocalSoftOverload is a soft layer past its episode under
// overload: every request is over the limit, consults the episodes of
// both limits and is refused.
func BenchmarkLocalSoftOverload(b *testing.B) {
	ctx := context.Background()
	l := mustNew(b, Config{Limit: 1, PerKey: 1, Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: time.Nanosecond, OverageCooldown: time.Hour}})
	held, _ := l.Acquire(ctx, shed.Request{Key: "k"})
	defer held.Release(shed.Completed)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ls, err := l.Acquire(ctx, shed.Request{Key: "k"}); err == nil {
				ls.Release(shed.Completed)
			}
		}
	})
}

// BenchmarkRedis measures acquire + release against the test server: two
// script calls, so two round trips, per request (one with AsyncRelease,
// whose removals go in batches). Serial figures are the
// latency; parallel ones the throughput of one instance.
func BenchmarkRedis(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		cfg   Config
		async bool
	}{
		{"overall", Config{Limit: 1 << 40}, false},
		{"overall+per-key", Config{Limit: 1 << 40, PerKey: 1 << 40}, false},
		{"overall/async-release", Config{Limit: 1 << 40}, true},
	} {
		r := mustNewRedis(b, c, RedisConfig{Config: tc.cfg, Prefix: redistest.Prefix(b), ExpectedInstances: 1,
			Timeout: time.Second, AsyncRelease: tc.async})
		req := shed.Request{Key: "client-42"}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ls, err := r.Acquire(ctx, req)
				if err != nil || ls.Fallback {
					b.Fatal(err, ls.Fallback)
				}
				ls.Release(shed.Completed)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16) // requests wait on the network, not the CPU
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ls, err := r.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					ls.Release(shed.Completed)
				}
			})
		})
	}
}

// BenchmarkRedisPipelineHook is BenchmarkRedis's acquire and release
// (overall and per key), serial and parallel, with and without
// redisx.Pipeline on the client (its scripts sent in batches by two
// flushers); compare with benchstat -col /pipeline.
func BenchmarkRedisPipelineHook(b *testing.B) {
	ctx := context.Background()
	req := shed.Request{Key: "client-42"}
	for _, parallel := range []bool{false, true} {
		for _, pipelined := range []bool{false, true} {
			name := "serial"
			if parallel {
				name = "parallel"
			}
			if pipelined {
				name += "/pipeline=on"
			} else {
				name += "/pipeline=off"
			}
			b.Run(name, func(b *testing.B) {
				redistest.Client(b) // skips without a server
				opt := redistest.Options(b)
				opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
				c := redis.NewClient(opt)
				b.Cleanup(func() { c.Close() })
				if pipelined {
					b.Cleanup(redisx.Pipeline(c, 2))
				}
				r := mustNewRedis(b, c, RedisConfig{Config: Config{Limit: 1 << 40, PerKey: 1 << 40}, Prefix: redistest.Prefix(b),
					ExpectedInstances: 1, Timeout: time.Second})
				b.ReportAllocs()
				if !parallel {
					for b.Loop() {
						ls, err := r.Acquire(ctx, req)
						if err != nil || ls.Fallback {
							b.Fatal(err, ls.Fallback)
						}
						ls.Release(shed.Completed)
					}
					return
				}
				b.SetParallelism(16) // requests wait on the network, not the CPU
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						ls, err := r.Acquire(ctx, req)
						if err != nil {
							b.Error(err)
							return
						}
						if ls.Fallback {
							b.Error("fell back")
							return
						}
						ls.Release(shed.Completed)
					}
				})
			})
		}
	}
}
