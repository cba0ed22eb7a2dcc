package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/sync/semaphore"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// BenchmarkConcurrencyLocal compares one acquire and its release of
// loadshed's local in-flight limiter with golang.org/x/sync/semaphore's
// TryAcquire and Release, limits far above the load so every acquire
// succeeds. loadshed's lease lives in a variable reused across iterations,
// as it lives in the chain's reused Grant (see concurrency's own
// benchmarks).
func BenchmarkConcurrencyLocal(b *testing.B) {
	ctx := context.Background()
	req := shed.Request{Key: "client-42"}
	type peer struct {
		name string
		once func(*shed.Lease) bool
	}
	newLoadshed := func(cfg concurrency.Config) func(*shed.Lease) bool {
		l, err := concurrency.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return func(ls *shed.Lease) bool {
			var err error
			if *ls, err = l.Acquire(ctx, req); err != nil {
				return false
			}
			ls.Release(shed.Completed)
			return true
		}
	}
	sem := semaphore.NewWeighted(1 << 40)
	peers := []peer{
		{"loadshed-overall", newLoadshed(concurrency.Config{Limit: 1 << 40})},
		{"loadshed-overall+per-key", newLoadshed(concurrency.Config{Limit: 1 << 40, PerKey: 1 << 40})},
		{"semaphore", func(*shed.Lease) bool {
			if !sem.TryAcquire(1) {
				return false
			}
			sem.Release(1)
			return true
		}},
	}
	for _, parallel := range []bool{false, true} {
		run := "serial"
		if parallel {
			run = "parallel"
		}
		for _, p := range peers {
			b.Run(run+"/peer="+p.name, func(b *testing.B) {
				b.ReportAllocs()
				var wrong atomic.Int64
				if !parallel {
					var ls shed.Lease
					for b.Loop() {
						if !p.once(&ls) {
							wrong.Add(1)
						}
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						var ls shed.Lease
						for pb.Next() {
							if !p.once(&ls) {
								wrong.Add(1)
							}
						}
					})
				}
				if wrong.Load() > 0 {
					b.Fatalf("%d acquires failed", wrong.Load())
				}
			})
		}
	}
}

// httpRow is one handler of the HTTP comparisons.
type httpRow struct {
	name string
	h    http.Handler
}

// benchHTTP serves requests through h serially or in parallel, with a
// fresh httptest.ResponseRecorder per request (recorder) or a reused writer
// that keeps nothing (discard), from the client addresses addrs taken in
// turn. Every response must be 200.
func benchHTTP(b *testing.B, h http.Handler, parallel, recorder bool, addrs []string) {
	b.ReportAllocs()
	var wrong, worker atomic.Int64
	serve := func(r *http.Request, d *DiscardWriter) {
		if recorder {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				wrong.Add(1)
			}
			return
		}
		d.Reset()
		h.ServeHTTP(d, r)
		if d.Status() != http.StatusOK {
			wrong.Add(1)
		}
	}
	loop := func(next func() bool) {
		r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
		d := NewDiscardWriter()
		i := int(worker.Add(1)*7919) % len(addrs)
		for next() {
			r.RemoteAddr = addrs[i]
			serve(r, d)
			if i++; i == len(addrs) {
				i = 0
			}
		}
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
	} else {
		loop(b.Loop)
	}
	if wrong.Load() > 0 {
		b.Fatalf("%d of %d responses were not 200", wrong.Load(), b.N)
	}
}

// clientAddrs returns n distinct client addresses (host:port).
func clientAddrs(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":40000"
	}
	return addrs
}

// BenchmarkConcurrencyHTTP compares chi's middleware.Throttle with
// loadshed's middleware holding only a local concurrency layer (an overall
// limit, as Throttle has), both around the same bare handler and with
// limits far above the load, against the bare handler itself. The
// difference with "bare" is what each adds per request.
func BenchmarkConcurrencyHTTP(b *testing.B) {
	bare := http.HandlerFunc(OKHandler)
	ls, stop, err := NewShedHandler(ShedStack{Concurrency: &concurrency.Config{Limit: 1 << 20}}, bare)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	rows := []httpRow{
		{"bare", bare},
		{"chi-throttle", middleware.Throttle(1 << 20)(bare)},
		{"loadshed-concurrency", ls},
	}
	addrs := clientAddrs(1)
	for _, writer := range []string{"recorder", "discard"} {
		for _, parallel := range []bool{false, true} {
			run := "serial"
			if parallel {
				run = "parallel"
			}
			for _, row := range rows {
				b.Run(writer+"/"+run+"/peer="+row.name, func(b *testing.B) {
					benchHTTP(b, row.h, parallel, writer == "recorder", addrs)
				})
			}
		}
	}
}

// BenchmarkChainHTTP is the whole chain that exists today, in memory,
// through loadshed's HTTP middleware, against the bare handler: the rate
// layer (per-key token bucket, 10⁹/s) and the concurrency layer (overall and
// per-key, limits far above the load), alone and together. The fleet and
// worker layers do not exist yet. keys=1 is one client address;
// keys=100000 cycles through as many, every key created before the timer
// starts.
func BenchmarkChainHTTP(b *testing.B) {
	bare := http.HandlerFunc(OKHandler)
	rl := ratelimit.Per(1e9, time.Second)
	cc := concurrency.Config{Limit: 1 << 40, PerKey: 1 << 40}
	stacks := []struct {
		name  string
		stack ShedStack
	}{
		{"loadshed-ratelimit", ShedStack{RateLimit: &rl}},
		{"loadshed-concurrency", ShedStack{Concurrency: &cc}},
		{"loadshed-ratelimit+concurrency", ShedStack{RateLimit: &rl, Concurrency: &cc}},
	}
	for _, nkeys := range []int{1, manyKeys} {
		addrs := clientAddrs(nkeys)
		for _, writer := range []string{"recorder", "discard"} {
			for _, parallel := range []bool{false, true} {
				run := "serial"
				if parallel {
					run = "parallel"
				}
				prefix := "keys=" + strconv.Itoa(nkeys) + "/" + writer + "/" + run + "/peer="
				b.Run(prefix+"bare", func(b *testing.B) { benchHTTP(b, bare, parallel, writer == "recorder", addrs) })
				for _, s := range stacks {
					h, stop, err := NewShedHandler(s.stack, bare)
					if err != nil {
						b.Fatal(err)
					}
					for _, a := range addrs { // create every key
						r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
						r.RemoteAddr = a
						h.ServeHTTP(NewDiscardWriter(), r)
					}
					b.Run(prefix+s.name, func(b *testing.B) { benchHTTP(b, h, parallel, writer == "recorder", addrs) })
					stop()
				}
			}
		}
	}
}
