package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/procstat"
	"github.com/loadshed/loadshed/internal/runrecord"
	"github.com/loadshed/loadshed/shed"
)

func TestSharesAreNeverRoundedUpToATarget(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1, "100%"},
		{0.99899, "99.89%"}, // not 99.90%: that would read as meeting 99.9%
		{0.999, "99.90%"},
		{0.9496, "94.9%"}, // not 95.0%
		{0.885, "88.5%"},
		{0, "0.0%"},
	} {
		if got := pct(c.f); got != c.want {
			t.Errorf("pct(%v) = %s, want %s", c.f, got, c.want)
		}
	}
	if got := ratio(1501*time.Microsecond, time.Millisecond); got != "1.51×" {
		t.Errorf("ratio 1.501 = %s, want 1.51× (rounded up, not read as 1.50×)", got)
	}
	if got := ratio(time.Millisecond, 0); got != "-" {
		t.Errorf("ratio to no floor = %s, want -", got)
	}
}

func TestRecoveryAfterAChange(t *testing.T) {
	// 100 answers a second, each sent and answered at once, critical every
	// tenth; the floor answers them all. From 2s to 3s the service answers
	// nothing: back at 3s, one second after the change at 2s.
	var samples []sample
	var arr []arrival
	var floorLat []time.Duration
	for i := range 600 {
		at := time.Duration(i) * 10 * time.Millisecond
		p := shed.Default
		if i%10 == 0 {
			p = shed.Critical
		}
		res := resOK
		if at >= 2*time.Second && at < 3*time.Second {
			res = resShed
		}
		samples = append(samples, sample{prio: p, res: res, latency: time.Millisecond, at: at})
		arr = append(arr, arrival{at: at, prio: p})
		floorLat = append(floorLat, time.Millisecond)
	}
	r := recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, true, refusalPrice{})
	if r.back != time.Second {
		t.Errorf("back after %s, want 1s (goodput %v, floor %v, critical %v)", r.back, r.goodput, r.floor, r.critical)
	}
	if len(r.goodput) != 10 || r.goodput[0] != 100 || r.goodput[2] != 0 {
		t.Errorf("windows from 1s: goodput %v", r.goodput)
	}
	// Critical requests alone failing keep it off target while critical
	// success is judged, not when critical demand does not fit.
	for i := range samples {
		if samples[i].prio == shed.Critical && samples[i].at >= 3*time.Second && samples[i].at < 4*time.Second {
			samples[i].res = resShed
		}
	}
	if r := recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, true, refusalPrice{}); r.back != 2*time.Second {
		t.Errorf("critical failing until 4s: back after %s, want 2s", r.back)
	}
	if r := recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, false, refusalPrice{}); r.back != time.Second {
		t.Errorf("critical not judged: back after %s, want 1s", r.back)
	}
	// Goodput is judged over a second: 100% and 85% of the floor's in turn
	// (the batches of a slowed pool) is back.
	alternate := slices.Clone(samples)
	for i := range alternate {
		if at := alternate[i].at; at >= 3*time.Second {
			alternate[i].res = resOK
			if (at/window)%2 == 1 && i%20 < 3 {
				alternate[i].res = resTimeout
			}
		}
	}
	if r := recoveryAfter(alternate, arr, floorLat, 2*time.Second, 6*time.Second, 100, false, refusalPrice{}); r.back != time.Second {
		t.Errorf("goodput 100%% and 85%% in turn: back after %s, want 1s (goodput %v)", r.back, r.goodput)
	}
	// A dip of one window later on does not undo the recovery; off target
	// every other window to the end, it is never back.
	for i := range samples {
		if samples[i].at >= 4500*time.Millisecond && samples[i].at < 5*time.Second {
			samples[i].res = resTimeout
		}
	}
	if r := recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, false, refusalPrice{}); r.back != time.Second {
		t.Errorf("a dip at 4.5s: back after %s, want 1s", r.back)
	}
	for i := range samples {
		if samples[i].at >= 3*time.Second && (samples[i].at/window)%2 == 0 {
			samples[i].res = resTimeout
		}
	}
	if r := recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, false, refusalPrice{}); r.back >= 0 {
		t.Errorf("off target every other window: back after %s, want never", r.back)
	}
}

// The recovery's goodput is judged against the floor's less what the
// refusals cost the server: the floor refuses for nothing, and a neighbour
// that took half the CPU makes each refusal cost twice as large a part of
// what is left.
func TestRecoveryPaysForRefusals(t *testing.T) {
	// 200 arrivals a second; the floor answers every other one, the
	// server 85 of each 100 the floor answers (85/s) and refuses the
	// other 115/s, each at 500µs of CPU.
	var samples []sample
	var arr []arrival
	var floorLat []time.Duration
	for i := range 1200 {
		at := time.Duration(i) * 5 * time.Millisecond
		res, fl := resShed, time.Duration(-1)
		if i%2 == 0 {
			fl = time.Millisecond
			if (i/2)%20 < 17 {
				res = resOK
			}
		}
		samples = append(samples, sample{prio: shed.Default, res: res, latency: time.Millisecond, at: at})
		arr = append(arr, arrival{at: at, prio: shed.Default})
		floorLat = append(floorLat, fl)
	}
	judge := func(p refusalPrice) recovery {
		return recoveryAfter(samples, arr, floorLat, 2*time.Second, 6*time.Second, 100, false, p)
	}
	if r := judge(refusalPrice{}); r.back >= 0 {
		t.Errorf("85%% of the floor's, refusals free: back after %s, want never", r.back)
	}
	// 115 refusals/s × 500µs = 5.75% of a whole CPU: 94.25/s left of the
	// floor's 100/s, and 85 is over 90% of that.
	if r := judge(refusalPrice{cost: 500 * time.Microsecond, cpuShare: 1}); r.back != 0 {
		t.Errorf("refusals paid on a whole CPU: back after %s, want at once (bound %v)", r.back, r.bound)
	}
	// 100µs a refusal is 1.15%: 98.85/s left, and 85 is under 90% of it.
	if r := judge(refusalPrice{cost: 100 * time.Microsecond, cpuShare: 1}); r.back >= 0 {
		t.Errorf("cheap refusals: back after %s, want never (bound %v)", r.back, r.bound)
	}
	// On half a CPU, the same 100µs costs 2.3%: still never; at 300µs,
	// 6.9% on half a CPU, 3.45% on a whole one.
	if r := judge(refusalPrice{cost: 300 * time.Microsecond, cpuShare: 1}); r.back >= 0 {
		t.Errorf("300µs on a whole CPU: back after %s, want never (bound %v)", r.back, r.bound)
	}
	if r := judge(refusalPrice{cost: 300 * time.Microsecond, cpuShare: 0.5}); r.back != 0 {
		t.Errorf("300µs on half a CPU: back after %s, want at once (bound %v)", r.back, r.bound)
	}
}

func TestSteadyLeavesOutTheChanges(t *testing.T) {
	var samples []sample
	for i := range 100 {
		samples = append(samples, sample{at: time.Duration(i) * 100 * time.Millisecond})
	}
	changes := []*change{{applied: 3 * time.Second}, {applied: 6 * time.Second}}
	// Without 3-5s and 6-8s: 100 - 20 - 20.
	if got := len(steady(samples, changes, false)); got != 60 {
		t.Errorf("the change left in: %d samples, want 60", got)
	}
	// Without 3-8s.
	if got := len(steady(samples, changes, true)); got != 50 {
		t.Errorf("the change left out: %d samples, want 50", got)
	}
	if got := len(steady(samples, nil, false)); got != 100 {
		t.Errorf("no change: %d samples, want 100", got)
	}
}

func TestABusyMachineIsNotTrusted(t *testing.T) {
	if ok, why := (quiet{known: true, foreign: 0.02, steal: 0.01, late: 0.001, stalled: 0.0004}).trusted(); !ok {
		t.Errorf("a quiet machine: not trusted (%s)", why)
	}
	for _, q := range []quiet{
		{known: true, foreign: 0.2},
		{known: true, steal: 0.1},
		{late: 0.05, lateP99: 30 * time.Millisecond},
		{stalled: 0.02, stalledP999: 800 * time.Millisecond},
		{known: true, saturating: true, serverCPU: 0.85},
		// The machine changed under the step, either way.
		{refusalCost: 28 * time.Microsecond, refusalAround: [2]time.Duration{28 * time.Microsecond, 60 * time.Microsecond}},
		{refusalCost: 60 * time.Microsecond, refusalAround: [2]time.Duration{40 * time.Microsecond, 0}},
	} {
		if ok, why := q.trusted(); ok || why == "" {
			t.Errorf("%+v: trusted", q)
		}
	}
	if ok, why := (quiet{known: true, saturating: true, serverCPU: 0.99}).trusted(); !ok {
		t.Errorf("a calibration that kept the server busy: not trusted (%s)", why)
	}
	if ok, why := (quiet{known: true, serverCPU: 0.5}).trusted(); !ok {
		t.Errorf("a step at half load: not trusted (%s)", why)
	}
	// Single rounds read a little above the least of several.
	q := quiet{refusalCost: 32 * time.Microsecond, refusalAround: [2]time.Duration{32 * time.Microsecond, 37 * time.Microsecond}}
	if ok, why := q.trusted(); !ok {
		t.Errorf("a refusal's cost within 16%%: not trusted (%s)", why)
	}
	q.refusalAround[1] = 41 * time.Microsecond
	if ok, why := q.trusted(); ok || !strings.Contains(why, "41.0µs after it, against the 32.0µs") {
		t.Errorf("a refusal's cost 28%% up: trusted %v (%s)", ok, why)
	}
	// A failed target on an untrusted step is UNSURE, not FAIL.
	r := &report{opts: options{setups: nil}, calibration: quiet{known: true, foreign: 0.3}}
	if ok, why := r.trusted(step{}); ok || !strings.Contains(why, "capacity was measured") {
		t.Errorf("busy calibration: trusted %v (%s)", ok, why)
	}
	if got := (verdict{unsure: true}).word(); got != "UNSURE" {
		t.Errorf("word %s, want UNSURE", got)
	}
}

func TestQuietBetweenReadings(t *testing.T) {
	now := time.Now()
	a := cpuTimes{at: now, cpuBusy: 10 * time.Second, allTotal: 100 * time.Second, allSteal: time.Second, ok: true}
	b := cpuTimes{at: now.Add(10 * time.Second), cpuBusy: 19 * time.Second, allTotal: 120 * time.Second, allSteal: 2 * time.Second, ok: true}
	// 9s busy on the server's CPU in 10s: 6s the server, 2s the neighbour,
	// 1s someone else.
	q := quietBetween(a, b, true, 6*time.Second, 2*time.Second, flood{late: 0.002})
	if !q.known || q.foreign < 0.099 || q.foreign > 0.101 || q.steal != 0.05 || q.serverCPU != 0.6 {
		t.Errorf("%+v", q)
	}
	if q := quietBetween(a, b, false, 6*time.Second, 0, flood{}); q.foreign != 0 {
		t.Errorf("unpinned: foreign %v, want 0 (unknown)", q.foreign)
	}
}

func TestListenOverflowsAreReportedNotExcused(t *testing.T) {
	now := time.Now()
	a := cpuTimes{at: now, overflows: 100, ok: true}
	b := cpuTimes{at: now.Add(time.Second), overflows: 7128, ok: true}
	q := quietBetween(a, b, false, 0, 0, flood{})
	if q.overflows != 7028 {
		t.Errorf("overflows %d, want 7028", q.overflows)
	}
	// A server that let its accept queue overflow is judged on what it
	// served: the overflow is its outcome, not the machine's noise.
	if ok, why := q.trusted(); !ok {
		t.Errorf("7028 overflows: untrusted (%s)", why)
	}
	st := step{setup: "loadshed", mult: 10, capacity: 480, quiet: q}
	if line := st.progressLine(); !strings.Contains(line, "the listen queue overflowed 7028 times") {
		t.Errorf("progress line does not report the overflows: %s", line)
	}
	// Unreadable (not Linux): nothing is known, nothing reported.
	a.overflows, b.overflows = -1, -1
	if q := quietBetween(a, b, false, 0, 0, flood{}); q.overflows != 0 {
		t.Errorf("unknown overflows read as %d", q.overflows)
	}
}

func TestReadingProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	burnSome := time.Now().Add(30 * time.Millisecond)
	for time.Now().Before(burnSome) {
	}
	if d, ok := procstat.CPU(os.Getpid()); !ok || d <= 0 {
		t.Errorf("this process's CPU time: %s, %v", d, ok)
	}
	if _, ok := procstat.CPU(-1); ok {
		t.Error("a process that does not exist: ok")
	}
	a := readCPUTimes(0, os.Getpid())
	if !a.ok || a.allTotal <= 0 || a.processes <= 0 {
		t.Errorf("%+v", a)
	}
	if _, err := os.Stat("/proc/net/netstat"); err == nil && a.overflows < 0 {
		t.Error("ListenOverflows not read from /proc/net/netstat")
	}
	if runrecord.LoadAverage() == "" {
		t.Error("no load average")
	}
}

// Critical success is judged during a change only where critical demand
// is at most 90% of the capacity measured: not at 5x on the noisy
// neighbour's half of the CPU, which reads within noise of it.
func TestCriticalFitsWithRoom(t *testing.T) {
	for _, c := range []struct {
		rate, capacity float64
		want           bool
	}{
		{96, 240, true},     // 2x, half the CPU: 0.4 of it
		{238.5, 239, false}, // 5x, half the CPU, as one run measured it
		{238.5, 477, true},  // 5x, the whole CPU: 0.5
		{477, 477, false},   // 10x, the whole CPU
		{240, 267, true},    // 0.899
		{241, 267.7, false}, // 0.900 and a little
	} {
		if got := criticalFits(c.rate, c.capacity); got != c.want {
			t.Errorf("critical at %.1f/s, capacity %.1f/s: fits %v, want %v", c.rate, c.capacity, got, c.want)
		}
	}
}
