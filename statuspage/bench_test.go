package statuspage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/statuspage"
)

// nopLayer admits everything and reports gauges, so that the benchmarks
// price the observer and the page, not a limiter.
type nopLayer struct{ name string }

func (l *nopLayer) Name() string { return l.name }
func (l *nopLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	lease := shed.NewLease(l)
	lease.Cost = 1
	return lease, nil
}
func (l *nopLayer) Release(*shed.Lease, shed.Outcome) {}
func (l *nopLayer) ReportGauges(emit func(layerkit.Gauge)) {
	for _, n := range []string{layerkit.GaugeInFlight, layerkit.GaugeLimit, layerkit.GaugeQueued, layerkit.GaugeShedLevel} {
		emit(layerkit.Gauge{Layer: l.name, Name: n, Value: 7})
	}
	emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeUtilization, Signal: "cpu", Value: 0.5})
}
func (l *nopLayer) TopClients(n int) []layerkit.ClientShare {
	out := make([]layerkit.ClientShare, n)
	for i := range out {
		out[i] = layerkit.ClientShare{Key: "client-" + string(rune('a'+i)), Priority: shed.Default, InFlight: int64(n - i), Share: 0.1}
	}
	return out
}

func nopLayers() []shed.Layer {
	return []shed.Layer{&nopLayer{"ratelimit"}, &nopLayer{"concurrency"}, &nopLayer{"fleet"}, &nopLayer{"worker"}}
}

// BenchmarkRequestPath is one request through the HTTP middleware and a
// chain of four layers, with no observer, with one that does nothing (what
// any observer costs: the chain times each layer, the middleware finds the
// route) and with the page's: the last two differ by what the page adds.
func BenchmarkRequestPath(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, obs := range []string{"none", "nop", "page"} {
		layers := nopLayers()
		cfg := shed.Config{Layers: layers}
		name := "observer=" + obs
		switch obs {
		case "nop":
			cfg.Observer = shed.ObserverFunc(func(shed.Event) {})
		case "page":
			rec, err := shedstatus.New(shedstatus.Config{Layers: layers})
			if err != nil {
				b.Fatal(err)
			}
			defer rec.Close()
			cfg.Observer = rec
		}
		chain, err := shed.NewChain(cfg)
		if err != nil {
			b.Fatal(err)
		}
		h := shedhttp.MustNew(chain, shedhttp.Config{})(ok)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest("GET", "/v1/charges", nil)
				w := &discard{h: http.Header{}}
				for pb.Next() {
					h.ServeHTTP(w, req)
				}
			})
		})
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	clear(d.h)
	return d.h
}
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkRefresh is what one refresh of the page costs the server, with
// four layers, five minutes of history, ten clients each and a full ring
// of rejections: the JSON, the part the page's script fetches each second,
// and the whole page.
func BenchmarkRefresh(b *testing.B) {
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	layers := nopLayers()
	rec, err := shedstatus.New(shedstatus.Config{Layers: layers, Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	for range 300 {
		rec.Observe(shed.Event{Layer: "worker", Kind: shed.Rejected, Priority: shed.Sheddable, Status: 503,
			Reason: "shedding", Policy: "cpu", Route: "GET /v1/reports"})
		clock.Advance(time.Second)
	}
	h := statuspage.New(rec, statuspage.Options{})
	for _, q := range []string{"?format=json", "?part=main", ""} {
		name := map[string]string{"?format=json": "json", "?part=main": "part", "": "page"}[q]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			req := httptest.NewRequest("GET", statuspage.Path+q, nil)
			w := &discard{h: http.Header{}}
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}
