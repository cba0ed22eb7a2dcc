package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// TestMain lets the test binary be the example server too, as the
// demonstration's own binary is: startServer runs os.Executable.
func TestMain(m *testing.M) {
	serveIfChild()
	os.Exit(m.Run())
}

// TestQuickRun runs the -quick demonstration (about 20 seconds, loopback
// only, bounded) and asserts what must hold on any machine, however busy:
// at 5× capacity, loadshed's layers get more critical requests through
// than the priority-blind limit and than no protection. It asserts no
// absolute figure: those depend on the machine.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demonstration for about 20 seconds")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	o, err := parseOptions([]string{"-quick", "-out", dir}, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := runAll(ctx, o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rep.printTables(&out)
	rep.printTargets(&out)
	if err := rep.save(dir); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())

	crit := map[api.Protection]float64{}
	for _, s := range rep.steps {
		if s.mult == targetStep {
			crit[s.setup] = s.stats[shed.Critical.Index()].successRate()
		}
	}
	if len(crit) != 3 {
		t.Fatalf("want a %d× step for each of the three set-ups, got %v", targetStep, crit)
	}
	if crit[api.Loadshed] <= crit[api.BlindLimit] {
		t.Errorf("critical success at %d×: loadshed %s, not above the priority-blind limit's %s", targetStep, pct(crit[api.Loadshed]), pct(crit[api.BlindLimit]))
	}
	if crit[api.Loadshed] <= crit[api.Unprotected] {
		t.Errorf("critical success at %d×: loadshed %s, not above no protection's %s", targetStep, pct(crit[api.Loadshed]), pct(crit[api.Unprotected]))
	}
	if len(rep.targets()) != 3 {
		t.Errorf("want three target verdicts, got %v", rep.targets())
	}
	for _, name := range []string{"overload.svg", "overload.png", "overload.txt"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", name, err)
		}
	}
}

func TestSummarise(t *testing.T) {
	var samples []sample
	for i := range 100 {
		samples = append(samples, sample{prio: shed.Critical, res: resOK, latency: time.Duration(i+1) * time.Millisecond})
	}
	samples = append(samples, sample{prio: shed.Sheddable, res: resShed}, sample{prio: shed.Sheddable, res: resTimeout})
	got := summarise(samples, 2*time.Second)
	crit, shd, all := got[shed.Critical.Index()], got[shed.Sheddable.Index()], got[shed.NumPriorities]
	if crit.sent != 100 || crit.successRate() != 1 || crit.p50 != 50*time.Millisecond || crit.p99 != 99*time.Millisecond || crit.goodput != 50 {
		t.Errorf("critical: %+v", crit)
	}
	if shd.sent != 2 || shd.counts[resShed] != 1 || shd.counts[resTimeout] != 1 || shd.successRate() != 0 || shd.p99 != 0 {
		t.Errorf("sheddable: %+v", shd)
	}
	if all.sent != 102 || all.goodput != 50 {
		t.Errorf("all: %+v", all)
	}
}

func TestPickPriorityFollowsTheMix(t *testing.T) {
	var counts [shed.NumPriorities]int
	rng := newRand(1)
	const n = 100_000
	for range n {
		counts[pickPriority(rng).Index()]++
	}
	for _, p := range shed.Priorities() {
		got := float64(counts[p.Index()]) / n
		if got < mix[p]-0.01 || got > mix[p]+0.01 {
			t.Errorf("%s: %.3f of requests, want %.2f", p, got, mix[p])
		}
	}
}

func TestParseOptionsRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-steps", "1,x"},
		{"-steps", "0"},
		{"-work", "0s"},
		{"-work", "2s"},
		{"-timeout", "0s"},
		{"-instances", "3"},
		{"-instances", "0", "-redis", "127.0.0.1:6379"},
		{"-setups", "none,magic"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		if _, err := parseOptions(args, &stderr); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	o, err := parseOptions(nil, &bytes.Buffer{})
	if err != nil || len(o.steps) != 5 || len(o.setups) != 3 || o.measure != 5*time.Second {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	o, err = parseOptions([]string{"-quick"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(o.steps, []float64{1, 5}) {
		t.Errorf("-quick: steps %v, %v", o.steps, err)
	}
}
