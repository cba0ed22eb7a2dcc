package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
)

// redisParallelism is RunParallel's goroutines per GOMAXPROCS on the Redis
// rows: requests wait on the network, not the CPU.
const redisParallelism = 16

// redisClient returns a client of LOADSHED_REDIS_ADDR with a round-trip
// counter, skipping the benchmark or test when the variable is empty.
func redisClient(tb testing.TB) (*redis.Client, *RoundTrips) {
	tb.Helper()
	c, rt, ok, err := NewRedisClient(redisParallelism * 4)
	if err != nil {
		tb.Fatal(err)
	}
	if !ok {
		why := RedisAddrEnv + " is empty: run scripts/bench.sh or scripts/test.sh, which start redis-server"
		if os.Getenv("LOADSHED_REQUIRE_REDIS") == "1" { // set by scripts/test.sh
			tb.Fatal(why)
		}
		tb.Skip(why)
	}
	tb.Cleanup(func() { c.Close() })
	return c, rt
}

// uniquePrefix keeps each row's keys apart on a shared server.
func uniquePrefix(tb testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "lsbench:" + hex.EncodeToString(b[:]) + ":"
}

// reportRedis adds the row's round trips and commands per decision, its
// decisions per second, and fails it when a decision came from a fallback
// or was not the one the row is about.
func reportRedis(b *testing.B, rt *RoundTrips, trips0, cmds0 int64, d interface{ Fallbacks() int64 }, wrong int64) {
	b.ReportMetric(float64(rt.Trips()-trips0)/float64(b.N), "rt/op")
	b.ReportMetric(float64(rt.Commands()-cmds0)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if d != nil && d.Fallbacks() > 0 {
		b.Fatalf("%d decisions came from the local fallback, not Redis", d.Fallbacks())
	}
	if wrong > 0 {
		b.Fatalf("%d of %d decisions were not the row's", wrong, b.N)
	}
}

// BenchmarkRedisRate compares loadshed's Redis store with go-redis/redis_rate
// on the same redis-server, in the same run, through the same client (pool
// of 64 connections, a round-trip counting hook):
//
//   - allow: 10⁹ per hour, burst 10⁹ per key: every decision admits;
//     keys=1 is one hot key, keys=1000 a thousand taken in turn;
//   - deny: 1 per hour, the key spent first: every decision refuses;
//   - serial: one goroutine (latency); parallel: 16 goroutines per
//     GOMAXPROCS (throughput, decisions/s);
//   - rt/op: round trips per decision, from the hook;
//   - client-µs/op, server-µs/op: CPU time per decision of this process and
//     of redis-server (INFO cpu), which share the machine's cores.
//
// loadshed's rows run with a 1s timeout so that no decision comes from the
// local fallback (a row fails if one does); -batch rows lease
// RedisBatchChunk units per round trip.
func BenchmarkRedisRate(b *testing.B) {
	c, rt := redisClient(b)
	cpu := newCPUMeter(b, c)
	ctx := context.Background()
	type row struct {
		allow    bool
		nkeys    int
		parallel bool
		peers    []string
	}
	all := []string{"redis_rate", "loadshed-gcra", "loadshed-token", "loadshed-gcra-batch", "loadshed-token-batch"}
	rows := []row{
		{true, 1, false, all},
		{true, 1, true, all},
		{true, 1000, true, all},
		{false, 1, true, []string{"redis_rate", "loadshed-gcra", "loadshed-gcra-nocache"}},
	}
	peers := map[string]RedisPeer{}
	for _, p := range RedisPeers() {
		peers[p.Name] = p
	}
	for _, r := range rows {
		path, n, per := "allow", int64(1e9), time.Hour
		if !r.allow {
			path, n = "deny", 1
		}
		run := "serial"
		if r.parallel {
			run = "parallel"
		}
		keys := makeKeys(r.nkeys)
		for _, name := range r.peers {
			// Built and warmed inside the row, once, so that rows -bench
			// leaves out cost the server nothing while the others run.
			var d RedisDecider
			b.Run(path+"/keys="+strconv.Itoa(r.nkeys)+"/"+run+"/peer="+name, func(b *testing.B) {
				if d == nil {
					var err error
					if d, err = peers[name].New(c, n, per, uniquePrefix(b)); err != nil {
						b.Fatalf("%s: %v", name, err)
					}
					for _, k := range keys {
						if _, err := d.Allow(ctx, k); err != nil { // loads the script; spends deny keys
							b.Fatalf("%s: %v", name, err)
						}
					}
					b.ResetTimer()
				}
				b.ReportAllocs()
				var wrong atomic.Int64
				trips0, cmds0 := rt.Trips(), rt.Commands()
				client0, server0 := cpu.read()
				if !r.parallel {
					i := 0
					for b.Loop() {
						if ok, err := d.Allow(ctx, keys[i]); err != nil || ok != r.allow {
							wrong.Add(1)
						}
						if i++; i == len(keys) {
							i = 0
						}
					}
				} else {
					var worker atomic.Int64
					b.SetParallelism(redisParallelism)
					b.RunParallel(func(pb *testing.PB) {
						i := int(worker.Add(1)*7919) % len(keys)
						for pb.Next() {
							if ok, err := d.Allow(ctx, keys[i]); err != nil || ok != r.allow {
								wrong.Add(1)
							}
							if i++; i == len(keys) {
								i = 0
							}
						}
					})
				}
				cpu.report(b, client0, server0)
				reportRedis(b, rt, trips0, cmds0, d, wrong.Load())
			})
			if d != nil {
				_ = d.Close()
			}
		}
	}
}

// BenchmarkRedisConcurrency is loadshed's fleet-wide in-flight limiter: one
// acquire and its release (two scripts, so two round trips) per request,
// with an overall limit, and with an overall and a per-key limit. No peer
// in the comparison has a Redis-backed concurrency limiter.
func BenchmarkRedisConcurrency(b *testing.B) {
	c, rt := redisClient(b)
	cpu := newCPUMeter(b, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  concurrency.Config
	}{
		{"overall", concurrency.Config{Limit: 1 << 40}},
		{"overall+per-key", concurrency.Config{Limit: 1 << 40, PerKey: 1 << 40}},
	} {
		l, err := concurrency.NewRedis(c, concurrency.RedisConfig{Config: tc.cfg, Prefix: uniquePrefix(b) + "c",
			ExpectedInstances: 1, Timeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		req := shed.Request{Key: "client-42"}
		for _, parallel := range []bool{false, true} {
			run := "serial"
			if parallel {
				run = "parallel"
			}
			b.Run(tc.name+"/"+run+"/peer=loadshed", func(b *testing.B) {
				b.ReportAllocs()
				var wrong atomic.Int64
				trips0, cmds0, fb0 := rt.Trips(), rt.Commands(), l.Fallbacks()
				client0, server0 := cpu.read()
				once := func(ls *shed.Lease) {
					var err error
					if *ls, err = l.Acquire(ctx, req); err != nil || ls.Fallback {
						wrong.Add(1)
					}
					ls.Release(shed.Completed)
				}
				if !parallel {
					var ls shed.Lease
					for b.Loop() {
						once(&ls)
					}
				} else {
					b.SetParallelism(redisParallelism)
					b.RunParallel(func(pb *testing.PB) {
						var ls shed.Lease
						for pb.Next() {
							once(&ls)
						}
					})
				}
				wrong.Add(l.Fallbacks() - fb0)
				cpu.report(b, client0, server0)
				reportRedis(b, rt, trips0, cmds0, nil, wrong.Load())
			})
		}
		_ = l.Close()
	}
}
