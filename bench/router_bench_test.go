package bench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

// routerKeys is how many API keys BenchmarkRouterHTTP cycles through.
const routerKeys = 1024

// newRouter returns a chi router with mw mounted by r.Use (nil: none)
// around one parameterised route.
func newRouter(mw func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	if mw != nil {
		r.Use(mw)
	}
	r.Get("/v1/things/{id}", OKHandler)
	return r
}

// BenchmarkRouterHTTP is the middleware's performance row: a chi router, the
// limiter mounted with r.Use, requests keyed by an X-API-Key header among
// 1024 keys, a reused writer. Rows: the bare router; go-chi/httprate
// limiting by that key (LimitBy, its default headers); loadshed with a
// per-key rate limit and a per-key in-flight cap (limits far above the
// load). What each adds is its row minus bare's, in the same run; the
// target is loadshed ≤ 0.4× httprate's.
func BenchmarkRouterHTTP(b *testing.B) {
	byKey := func(r *http.Request) (string, error) { return r.Header.Get("X-API-Key"), nil }
	store, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.Per(1e9, time.Second), ratelimit.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	rate, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: store}}})
	if err != nil {
		b.Fatal(err)
	}
	inFlight, err := concurrency.New(concurrency.Config{PerKey: 1 << 40, KeyBy: concurrency.KeyByClient})
	if err != nil {
		b.Fatal(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight}})
	if err != nil {
		b.Fatal(err)
	}
	rows := []httpRow{
		{"bare", newRouter(nil)},
		{"httprate", newRouter(httprate.LimitBy(1e9, time.Second, byKey))},
		{"loadshed", newRouter(shedhttp.MustNew(chain, shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key")}))},
	}
	// All four layers (the target: at most half of what httprate
	// adds), when there is a Redis for the fleet layer's background tick;
	// its request path never calls it. The worker layer counts in-flight
	// work against a budget and reads no CPU, so that the benchmark's own
	// load does not make it shed: its request path is the same while
	// nothing is shed.
	if c, _, ok, err := NewRedisClient(4); err != nil {
		b.Fatal(err)
	} else if ok {
		defer c.Close()
		usage, err := fleet.New(fleet.Config{Client: c, Prefix: uniquePrefix(b), Capacity: 1 << 40, Interval: fleet.DefaultInterval})
		if err != nil {
			b.Fatal(err)
		}
		defer usage.Close()
		busy, err := worker.New(worker.Config{Interval: worker.DefaultInterval, CPU: worker.CPUConfig{Disable: true}, SchedLatencyTarget: -1, Workers: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		defer busy.Close()
		all, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight, usage, busy}})
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, httpRow{"loadshed-4-layers", newRouter(shedhttp.MustNew(all, shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key")}))})
	}
	reqs := make([]*http.Request, routerKeys)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/v1/things/"+strconv.Itoa(i), nil)
		reqs[i].Header.Set("X-API-Key", "ak_"+strconv.Itoa(i*7919))
	}
	for _, parallel := range []bool{false, true} {
		run := "serial"
		if parallel {
			run = "parallel"
		}
		for _, row := range rows {
			for _, r := range reqs { // create every key
				row.h.ServeHTTP(NewDiscardWriter(), r)
			}
			b.Run(run+"/peer="+row.name, func(b *testing.B) {
				b.ReportAllocs()
				loop := func(next func() bool, i int) {
					d := NewDiscardWriter()
					for next() {
						d.Reset()
						row.h.ServeHTTP(d, reqs[i])
						if d.Status() != http.StatusOK {
							b.Errorf("status %d", d.Status())
							return
						}
						if i++; i == len(reqs) {
							i = 0
						}
					}
				}
				if parallel {
					b.RunParallel(func(pb *testing.PB) { loop(pb.Next, 0) })
				} else {
					loop(b.Loop, 0)
				}
			})
		}
	}
}
