package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSpeedChangeFromTheWorkCPUTime(t *testing.T) {
	for _, c := range []struct {
		cal, step, want float64
	}{
		{0.002, 0.002, 0},
		{0.002, 0.0025, -0.2}, // the same work took a quarter longer: a fifth slower
		{0.002, 0.001, 1},
		{0, 0.002, 0}, // the capacity not the CPU's, or not timed
		{0.002, 0, 0}, // nothing timed in the step
	} {
		if got := speedChange(c.cal, c.step); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("speedChange(%v, %v) = %v, want %v", c.cal, c.step, got, c.want)
		}
	}
	if got := perRequest(workClock{cpu: 1, n: 100}, workClock{cpu: 1.5, n: 300}); math.Abs(got-0.0025) > 1e-12 {
		t.Errorf("perRequest: %v, want 0.0025", got)
	}
	if got := perRequest(workClock{cpu: 1, n: 100}, workClock{cpu: 1, n: 100}); got != 0 {
		t.Errorf("perRequest with nothing timed: %v, want 0", got)
	}
}

func TestAChangedCPUSpeedIsNotTrusted(t *testing.T) {
	if ok, why := (quiet{known: true, speed: -0.04}).trusted(); !ok {
		t.Errorf("4%% slower: not trusted (%s)", why)
	}
	ok, why := (quiet{known: true, speed: -0.08}).trusted()
	if ok || !strings.Contains(why, "8.0% slower") {
		t.Errorf("8%% slower: trusted %v (%q)", ok, why)
	}
	ok, why = (quiet{known: true, speed: 0.06}).trusted()
	if ok || !strings.Contains(why, "6.0% faster") {
		t.Errorf("6%% faster: trusted %v (%q)", ok, why)
	}
}

func TestReadWorkClockSumsTheServers(t *testing.T) {
	serve := func(cpu float64, n int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "# TYPE loadshed_example_work_cpu_seconds_total counter\nloadshed_example_work_cpu_seconds_total %g\nloadshed_example_work_timed_total %d\n", cpu, n)
		}))
	}
	a, b := serve(0.5, 250), serve(0.25, 125)
	defer a.Close()
	defer b.Close()
	w, ok := readWorkClock([]string{a.URL, b.URL})
	if !ok || w.cpu != 0.75 || w.n != 375 {
		t.Errorf("two servers: %+v, ok %v; want 0.75 s over 375", w, ok)
	}
	none := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "loadshed_example_in_flight 0")
	}))
	defer none.Close()
	if _, ok := readWorkClock([]string{a.URL, none.URL}); ok {
		t.Error("a server that does not time its work: ok")
	}
}
