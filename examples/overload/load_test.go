package main

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// The connections opened before a flood are the ones its requests use:
// the server accepts no new one for them, and one left waiting past
// warmFor is replaced rather than used.
func TestRequestsUseTheConnectionsOpenedFirst(t *testing.T) {
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newLoadClient([]string{srv.URL}, 0, time.Second, 8)
	defer c.close()
	if err := c.openConns(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	waitFor(t, func() bool { return accepted.Load() == 3 }, "the server to accept the 3 connections opened")
	if s := c.do(context.Background(), shed.Default, 0); s.res != resOK {
		t.Fatalf("request: result %d, want ok", s.res)
	}
	if n, left := accepted.Load(), len(c.warm[addr]); n != 3 || left != 2 {
		t.Errorf("after one request: %d connections accepted (want 3: none new), %d left unused (want 2)", n, left)
	}

	// Stale: the two left are closed, not used, when the transport next
	// needs a connection (the one the first request left idle is closed
	// here, so the next request needs one), and a new one is dialled.
	for range 2 {
		w := <-c.warm[addr]
		w.at = time.Now().Add(-warmFor)
		c.warm[addr] <- w
	}
	c.client.CloseIdleConnections()
	if s := c.do(context.Background(), shed.Default, 0); s.res != resOK {
		t.Fatalf("request: result %d, want ok", s.res)
	}
	waitFor(t, func() bool { return accepted.Load() == 4 }, "the server to accept a new connection for the stale ones")
	if left := len(c.warm[addr]); left != 0 {
		t.Errorf("%d stale connections left, want 0 (each taken and closed)", left)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGeneratorWaits(t *testing.T) {
	// Buckets in seconds: [0, 1ms), [1ms, 10ms), [10ms, 100ms), [100ms, 1s), [1s, +Inf).
	buckets := []float64{0, 0.001, 0.01, 0.1, 1, math.Inf(1)}
	a := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{100, 10, 0, 0, 0}}
	// Between the readings: 9,000 waits under 1ms, 970 under 10ms, 20 under
	// 100ms, 10 under 1s. Over stalledBy (50ms): the buckets from 100ms on
	// (whole buckets only: the one holding 50ms counts as under).
	b := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{9100, 980, 20, 10, 0}}
	stalled, p999 := generatorWaits(a, b)
	if stalled != 10.0/10000 {
		t.Errorf("stalled %v, want 0.001", stalled)
	}
	// The 9,990th of 10,000 is in [10ms, 100ms).
	if p999 != 100*time.Millisecond {
		t.Errorf("p99.9 %s, want 100ms", p999)
	}
	// The last bucket's upper bound is infinite: its lower one is given.
	c := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{100, 10, 0, 0, 50}}
	if _, p999 := generatorWaits(a, c); p999 != time.Second {
		t.Errorf("p99.9 in the open bucket: %s, want 1s", p999)
	}
	if s, p := generatorWaits(a, a); s != 0 || p != 0 {
		t.Errorf("no waits between: %v, %s", s, p)
	}
	if s, _ := generatorWaits(nil, b); s != 0 {
		t.Errorf("no first reading: %v", s)
	}
}

func TestGeneratorWaitsSeeAStall(t *testing.T) {
	a := readSchedLatencies()
	if a == nil {
		t.Skip("the runtime keeps no scheduler latencies")
	}
	// One P and 200 goroutines that each want it for 2ms, less than the
	// runtime's slice of 10ms: they run one after the other, and all but
	// the first 25 wait over 50ms (up to 400ms) before they run. The
	// runtime records only some of the waits (every eighth), so there
	// must be many.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for end := time.Now().Add(2 * time.Millisecond); time.Now().Before(end); {
			}
		}()
	}
	wg.Wait()
	stalled, p999 := generatorWaits(a, readSchedLatencies())
	if stalled == 0 || p999 < stalledBy {
		t.Errorf("200 goroutines sharing one P: stalled %v, p99.9 %s", stalled, p999)
	}
}
