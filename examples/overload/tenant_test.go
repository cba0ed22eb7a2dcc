package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// tenantArrivals is a heavy client at heavy × the capacity of one server
// of 2ms (500/s) and lightKeys light ones together at lightLoad of it,
// Poisson, for d, as the tenant scenarios offer them.
func tenantArrivals(heavy float64, critical float64, d time.Duration) []arrival {
	return poissonArrivals(newRand(7), (heavy+lightLoad)*500, d, tenantTraffic{critical: critical}.pick(heavy))
}

// The fair floor serves every light client's request, at about the
// unloaded latency, and the heavy client the rest; the floor that treats
// them as one client serves the light ones only as often as the heavy
// one's flood leaves room.
func TestFairFloorServesTheLightClients(t *testing.T) {
	arr := tenantArrivals(10, 0, 6*time.Second)
	m := floorModel{servers: 1, service: 2 * ms1, timeout: time.Second, end: 6 * time.Second, fair: true}
	f, _ := m.floor(arr, time.Second, 5*time.Second)
	lf := f.light[shed.NumPriorities]
	if lf.sent < 200 || lf.success != 1 {
		t.Errorf("fair: light clients served %d of %d, want all of about 250", lf.served, lf.sent)
	}
	// A light request waits for the one being served and, one time in ten
	// or so, for another light one just ahead (50 a second, 2ms each):
	// 6ms at most, never the heavy client's queue.
	if lf.p99 > 6*ms1 {
		t.Errorf("fair: light p99 %s, want at most 6ms (at most two requests ahead, then its own)", lf.p99)
	}
	if f.goodput < 490 {
		t.Errorf("fair: goodput %.0f/s, want the capacity (500/s): the heavy client takes what the light ones leave", f.goodput)
	}

	m.fair = false
	blind, _ := m.floor(arr, time.Second, 5*time.Second)
	if blind.light[shed.NumPriorities].sent != 0 {
		t.Errorf("one client: light figures %+v, want none", blind.light)
	}
	// The same arrivals as one client's, newest first: a light request is
	// served only when it is the newest as a server frees, about one in
	// ten.
	lat := m.simulate(arr, newestFirst)
	served, sent := 0, 0
	for i, a := range arr {
		if a.at >= time.Second && light(a.client) {
			sent++
			if lat[i] >= 0 {
				served++
			}
		}
	}
	if share := float64(served) / float64(sent); share > 0.3 {
		t.Errorf("one client, newest first: light clients served %.2f, want about a tenth", share)
	}
}

// Strict priority across levels, max-min fairness within each: in
// tenant-critical at 10×, the heavy client's critical requests alone fill
// the server, the light clients' critical requests are all served, and
// their default ones get nothing.
func TestFairFloorIsStrictAcrossPriorities(t *testing.T) {
	arr := tenantArrivals(20, tenantCritical, 6*time.Second)
	m := floorModel{servers: 1, service: 2 * ms1, timeout: time.Second, end: 6 * time.Second, fair: true}
	f, _ := m.floor(arr, time.Second, 5*time.Second)
	crit, def := f.light[shed.Critical.Index()], f.light[shed.Default.Index()]
	if crit.sent == 0 || crit.success != 1 {
		t.Errorf("light critical: %d of %d served, want all", crit.served, crit.sent)
	}
	if def.sent == 0 || def.success > 0.05 {
		t.Errorf("light default: %d of %d served, want next to none (the heavy client's critical requests fill the server)", def.served, def.sent)
	}
}

// Within one priority, three clients of different demand on one server of
// 1ms (1,000/s) for 1s: one at 100/s, one at 300/s, one at 2,000/s. Max-min
// fair: the first two get all they ask (400/s), the third the remaining
// 600/s.
func TestFairLevelSharesMaxMin(t *testing.T) {
	var arr []arrival
	for i, rate := range []int{100, 300, 2000} {
		for j := range rate {
			// Evenly spread, each client offset from the others.
			at := time.Duration(j)*time.Second/time.Duration(rate) + time.Duration(i)*time.Microsecond
			arr = append(arr, arrival{at: at, prio: shed.Default, client: i})
		}
	}
	slices.SortStableFunc(arr, func(a, b arrival) int { return int(a.at - b.at) })
	m := floorModel{servers: 1, service: ms1, timeout: 100 * ms1, end: time.Second, fair: true}
	lat := m.simulate(arr, oldestFirst)
	var served [3]int
	for i, a := range arr {
		if lat[i] >= 0 {
			served[a.client]++
		}
	}
	if served[0] != 100 || served[1] < 299 {
		t.Errorf("served %v: the clients below their share must get all they ask (100, 300)", served)
	}
	if served[2] < 580 || served[2] > 600 {
		t.Errorf("served %v: the heavy client must get what the others leave, about 600", served)
	}
}

func TestTenantTrafficPicksTheHeavyClientByItsShare(t *testing.T) {
	for _, c := range []struct {
		mult, critical float64
	}{{5, 0}, {50, 0}, {10, tenantCritical}} {
		pick := tenantTraffic{critical: c.critical}.pick(c.mult)
		rng := newRand(3)
		const n = 200_000
		heavy, crit := 0, 0
		lights := map[int]int{}
		for range n {
			p, key := pick(rng)
			if key == heavyKey {
				heavy++
			} else {
				lights[key]++
			}
			if p == shed.Critical {
				crit++
			} else if p != shed.Default {
				t.Fatalf("priority %s: want default or critical", p)
			}
		}
		if want := c.mult / (c.mult + lightLoad); math.Abs(float64(heavy)/n-want) > 0.003 {
			t.Errorf("%.0f×: heavy share %.4f, want %.4f", c.mult, float64(heavy)/n, want)
		}
		if len(lights) != lightKeys {
			t.Errorf("%.0f×: %d light keys used, want %d", c.mult, len(lights), lightKeys)
		}
		if math.Abs(float64(crit)/n-c.critical) > 0.005 {
			t.Errorf("%.0f×: critical share %.4f, want %.2f", c.mult, float64(crit)/n, c.critical)
		}
	}
	keys := tenantTraffic{}.keys()
	if len(keys) != lightKeys+1 || keys[heavyKey] != "heavy" || keys[1] != "light-01" {
		t.Errorf("keys %v", keys)
	}
	// The key reaches the server as its X-API-Key.
	c := newLoadClient([]string{"http://127.0.0.1:1"}, 0, time.Second, 1)
	c.keys = keys
	if got := c.keyName(3); got != "light-03" {
		t.Errorf("key 3: %s", got)
	}
	c.keys = nil
	if got := c.keyName(3); got != "client-03" {
		t.Errorf("key 3 of the usual traffic: %s", got)
	}
}

func TestGoodputBound(t *testing.T) {
	// 4,347 refusals a second at 20µs leave 91.3% of the capacity.
	if got := goodputBound(480, 4347, 20*time.Microsecond); math.Abs(got-480*(1-0.08694)) > 1e-9 {
		t.Errorf("bound %.3f", got)
	}
	if got := goodputBound(480, 0, 20*time.Microsecond); got != 480 {
		t.Errorf("no refusals: bound %.3f, want the capacity", got)
	}
	if got := goodputBound(480, 1e6, 20*time.Microsecond); got != 0 {
		t.Errorf("refusals beyond the CPU: bound %.3f, want 0", got)
	}
}

// With a capacity change, each phase pays for its own refusals, and while a
// neighbour burns part of the CPU a refusal costs a larger part of what it
// leaves.
func TestBoundWithChange(t *testing.T) {
	const from, to, t1, t2 = time.Second, 11 * time.Second, 4 * time.Second, 7 * time.Second
	// 100 refusals a second at 1ms each: a tenth of the CPU. Before the
	// flood's measured time, and answered requests, cost nothing here.
	var samples []sample
	for at := time.Duration(0); at < to; at += 10 * time.Millisecond {
		samples = append(samples, sample{res: resShed, at: at}, sample{res: resOK, at: at})
	}
	samples = append(samples, sample{res: resThrottle, at: to})
	whole := refusalPrice{cost: ms1, cpuShare: 1}
	half := refusalPrice{cost: ms1, cpuShare: 0.5} // a neighbour on the CPU
	// Outside the change 7s × 500/s × 0.9; during it 3s × 250/s × (1 −
	// 0.1/0.5) with the neighbour on the CPU, × 0.9 with a slower downstream.
	if got, want := boundWithChange(samples, from, to, t1, t2, 500, 250, whole, half), (7*500*0.9+3*250*0.8)/10; math.Abs(got-want) > 1e-9 {
		t.Errorf("neighbour on the CPU: bound %.3f, want %.3f", got, want)
	}
	if got, want := boundWithChange(samples, from, to, t1, t2, 500, 250, whole, whole), (7*500*0.9+3*250*0.9)/10; math.Abs(got-want) > 1e-9 {
		t.Errorf("slower downstream: bound %.3f, want %.3f", got, want)
	}
	if got, want := boundWithChange(nil, from, to, t1, t2, 500, 250, whole, half), (7*500+3*250)/10.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("no refusals: bound %.3f, want the capacity averaged, %.3f", got, want)
	}
	// Refusals during the change that take all the CPU the neighbour leaves:
	// nothing is left to answer with then.
	var during []sample
	for at := t1; at < t2; at += time.Millisecond {
		during = append(during, sample{res: resShed, at: at})
	}
	if got, want := boundWithChange(during, from, to, t1, t2, 500, 250, whole, half), 7*500/10.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("the neighbour's share spent on refusals: bound %.3f, want %.3f", got, want)
	}
}

// A tenant step is judged on the light clients at each priority the floor
// serves in full, and on goodput against the bound.
func TestTenantTargets(t *testing.T) {
	stats := func(sent, ok int, p99 time.Duration) stepStats {
		s := stepStats{sent: sent, p99: p99, goodput: float64(ok) / 8}
		s.counts[resOK], s.counts[resShed] = ok, sent-ok
		return s
	}
	var ts tenantStats
	ts.light[shed.Critical.Index()] = stats(10, 10, 70*ms1)
	ts.light[shed.Default.Index()] = stats(70, 2, 80*ms1)
	ts.light[shed.NumPriorities] = stats(80, 12, 80*ms1)
	st := step{setup: api.Loadshed, mult: 10, capacity: 100, bound: 90, refusals: 400, tenant: &ts}
	st.stats[shed.NumPriorities] = stats(8000, 760, 300*ms1)
	st.floor.light[shed.Critical.Index()] = classFigures{sent: 10, served: 10, success: 1, p99: 60 * ms1}
	st.floor.light[shed.Default.Index()] = classFigures{sent: 70, served: 3, success: 3.0 / 70, p99: 800 * ms1}
	r := &report{opts: options{setups: []api.Protection{api.Loadshed}}, sc: scenario{name: scenarioTenantCritical, tenant: &tenantTraffic{critical: tenantCritical}},
		steps: []step{st}, refusalCost: 25 * time.Microsecond}
	var got []string
	for _, v := range r.targets() {
		got = append(got, v.word()+" "+v.name)
	}
	want := []string{
		"PASS light clients (critical) served ≥ 99.9%",
		"PASS light clients (critical) p99 ≤ 1.5× the floor's (60.0ms)",
		// The default ones are not judged: the floor serves 4% of them.
		"PASS goodput ≥ 95% of the bound (85.5/s)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Goodput under 95% of the bound fails, and a light p99 over 1.5× the
	// floor's.
	r.steps[0].stats[shed.NumPriorities] = stats(8000, 680, 300*ms1)
	ts.light[shed.Critical.Index()].p99 = 91 * ms1
	fails := 0
	for _, v := range r.targets() {
		if v.word() == "FAIL" {
			fails++
		}
	}
	if fails != 2 {
		t.Errorf("%d failures, want 2 (goodput 85/s under 85.5/s; p99 91ms over 90ms)", fails)
	}
	var b bytes.Buffer
	r.printTenantTable(&b)
	if !strings.Contains(b.String(), "light priority") || !strings.Contains(b.String(), "critical") {
		t.Errorf("tenant table:\n%s", b.String())
	}
}

// A run writes its scenarios into the results files and keeps the others
// there.
func TestResultsKeepTheOtherScenarios(t *testing.T) {
	dir := t.TempDir()
	rep := func(name string) *report {
		sc, err := newScenario(name, options{pool: 4, latency: 30 * ms1, work: 2 * ms1})
		if err != nil {
			t.Fatal(err)
		}
		return &report{opts: options{setups: []api.Protection{api.Loadshed}, steps: []float64{5}}, sc: sc, capacity: 100, refusalCost: 20 * time.Microsecond}
	}
	if err := writeResults(dir, []string{"-scenario", "io"}, []*report{rep(scenarioIO)}); err != nil {
		t.Fatal(err)
	}
	if err := writeResults(dir, []string{"-scenario", "tenant-io"}, []*report{rep(scenarioTenantIO)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, resultsJSON))
	if err != nil {
		t.Fatal(err)
	}
	var file resultsFile
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Scenarios) != 2 || file.Scenarios[scenarioIO].Command != "go run ./examples/overload -scenario io" ||
		file.Scenarios[scenarioTenantIO].Report.RefusalCost != 20 || file.About == "" {
		t.Errorf("results: %+v", file)
	}
	if _, err := time.Parse(time.RFC3339, file.Scenarios[scenarioIO].Date); err != nil {
		t.Errorf("date: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, resultsMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(md), "<!-- Generated") || strings.Index(string(md), "\n## io\n") > strings.Index(string(md), "\n## tenant-io\n") {
		t.Errorf("overload.md, io then tenant-io:\n%s", md)
	}
}

func TestScenarioTenantRunsTheThree(t *testing.T) {
	o, err := parseOptions([]string{"-scenario", "tenant", "-quick"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(o.scenarios, tenantScenarios) {
		t.Fatalf("-scenario tenant: %v, %v", o.scenarios, err)
	}
	sc, err := newScenario(scenarioTenantIO, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.forScenario(sc); !slices.Equal(got.steps, []float64{5, 50}) || got.measure != 2*time.Second {
		t.Errorf("-quick tenant-io: steps %v, step %s", got.steps, got.measure)
	}
	o, _ = parseOptions([]string{"-scenario", "tenant-cpu", "-steps", "10", "-step", "3s"}, &bytes.Buffer{})
	sc, _ = newScenario(scenarioTenantCPU, o)
	if got := o.forScenario(sc); !slices.Equal(got.steps, []float64{10}) || got.measure != 3*time.Second {
		t.Errorf("-steps 10 -step 3s: steps %v, step %s", got.steps, got.measure)
	}
	o, _ = parseOptions(nil, &bytes.Buffer{})
	sc, _ = newScenario(scenarioCPU, o)
	if got := o.forScenario(sc); !slices.Equal(got.steps, o.steps) || sc.tenant != nil {
		t.Errorf("cpu: steps %v", got.steps)
	}
}

// The refusing server is this binary again (TestMain): what one refusal
// costs it is measured from /proc.
func TestRefusalCostIsMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and refuses requests for about a second")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A file, as in a run: the child's output and startChild write to it
	// at once.
	log, err := os.Create(filepath.Join(t.TempDir(), "refuser.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cost, err := measureRefusalCost(ctx, pinning{}, log, 1, 500*time.Millisecond)
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("%v (server log: %s)", err, b)
	}
	// A net/http server spends some microseconds of CPU on a request it
	// refuses: never nothing, never a millisecond.
	if cost < 500*time.Nanosecond || cost > time.Millisecond {
		t.Errorf("a refusal costs %s", cost)
	}
}
