package shedhttp_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

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
	// The sweepers' goroutines have returned before Close did; allow the
	// runtime's own a moment to settle.
	for range 100 {
		if runtime.NumGoroutine() <= before {
			break
		}
		runtime.Gosched()
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines before the builds, %d after closing them", before, after)
	}
}
