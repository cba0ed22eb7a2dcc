package api

import (
	"net/http"
	"strings"
	"testing"
)

// Each request's work is timed on its thread's CPU clock and counted in
// the metrics, where the overload demonstration reads the CPU's speed.
func TestWorkIsTimedOnTheThreadCPUClock(t *testing.T) {
	svc, srv := serve(t, Config{Protection: Unprotected})
	for range 3 {
		if status, _ := do(t, srv, http.MethodGet, "/v1/charges?work=1ms"); status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
	}
	cpu, n := svc.WorkCPU()
	if n != 3 || cpu <= 0 {
		t.Fatalf("work timed: %s over %d requests, want some over 3", cpu, n)
	}
	_, body := do(t, srv, http.MethodGet, "/metrics")
	if !strings.Contains(body, "loadshed_example_work_timed_total 3\n") || !strings.Contains(body, "loadshed_example_work_cpu_seconds_total ") {
		t.Errorf("metrics without the work's CPU time:\n%s", body)
	}
}
