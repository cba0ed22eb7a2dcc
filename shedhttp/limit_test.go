package shedhttp_test

import (
	"context"

	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

// sweeperLayer runs a goroutine from its construction until Close, as a
// layer's background sweeper or sync does.
type sweeperLayer struct {
	*shedtest.Layer
	stop, done chan struct{}
}

func newSweeperLayer() *sweeperLayer {
	l := &sweeperLayer{Layer: shedtest.NewLayer("sweeper"), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		<-l.stop
	}()
	return l
}

func (l *sweeperLayer) Close() error {
	close(l.stop)
	<-l.done
	return nil
}

// Handlers built from Limit in a loop, and closed, leave nothing behind:
// no goroutine of a layer, no timer of a worker layer's sampler (on a
// manual clock, whose pending timers can be counted), whatever the layers
// Limit was given inline.
func TestLimitCloseLeavesNothingRunning(t *testing.T) {
	before := runtime.NumGoroutine()
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	for i := range 20 {
		w, err := worker.New(worker.Config{Interval: time.Second, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		mw := shedhttp.Limit(ratelimit.PerKey(10, time.Minute), concurrency.PerKey(1), w, newSweeperLayer())
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("build %d: status %d", i, rec.Code)
		}
		if err := mw.Close(); err != nil {
			t.Fatalf("build %d: Close: %v", i, err)
		}
		if err := mw.Close(); err != nil {
			t.Fatalf("build %d: second Close: %v", i, err)
		}
	}
	if n := clock.Pending(); n != 0 {
		t.Errorf("%d sampler timers still pending after Close", n)
	}
	// Each sweeper has closed its done channel before Close returned, but
	// may not have returned itself yet: give them a bounded moment.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines before the builds, %d after closing them", before, after)
	}
}

// Config.Limit is Limit with settings: the key, route priorities and the
// requests to skip reach the layers as they would through New.
func TestConfigLimitAppliesItsSettings(t *testing.T) {
	seen := shedtest.NewLayer("seen")
	var got []shed.Request
	seen.OnAcquire = func(_ context.Context, req shed.Request) { got = append(got, req) }
	mw := shedhttp.Config{
		Key:        shedhttp.KeyHeader("X-API-Key"),
		Priorities: shedhttp.RoutePriorities{"/v1/reports/*": shed.Sheddable},
		Skip:       func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	}.Limit(seen)
	defer mw.Close()
	r := chi.NewRouter()
	r.Use(mw)
	for _, p := range []string{"/v1/reports/{id}", "/v1/charges", "/healthz"} {
		r.Get(p, func(http.ResponseWriter, *http.Request) {})
	}
	for _, path := range []string{"/v1/reports/7", "/v1/charges", "/healthz"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-API-Key", "k1")
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(got) != 2 {
		t.Fatalf("the layer saw %d requests, want 2 (/healthz skipped)", len(got))
	}
	if got[0].Key != "h:x-api-key:k1" || got[0].Priority != shed.Sheddable || got[1].Priority != shed.Default {
		t.Errorf("the layer saw %+v and %+v, want key h:x-api-key:k1, sheddable then default", got[0], got[1])
	}
}

// Config.Limit panics on an invalid Config, as MustNew does.
func TestConfigLimitPanicsOnABadConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a negative MaxKeyLength")
		}
	}()
	shedhttp.Config{MaxKeyLength: -1}.Limit(shedtest.NewLayer("a"))
}

// New's Middleware does not own the chain it was given: its Close leaves
// the chain's layers running, for the caller to close.
func TestNewCloseLeavesTheCallersChainOpen(t *testing.T) {
	l := newSweeperLayer()
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := shedhttp.New(chain, shedhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-l.done:
		t.Fatal("the middleware's Close closed the caller's chain")
	default:
	}
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("after the middleware's Close: status %d, want 200", rec.Code)
	}
	if err := chain.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.done // the chain's owner closes it
}
