// Command overload floods the example server (examples/server) and shows
// what survives: the same API with no protection, behind a priority-blind
// rate limit set a little below its capacity, and behind loadshed's default
// set-up, judged against the floor: what a perfect strict-priority
// scheduler with no overhead would have made of the same arrivals.
//
//	go run ./examples/overload                          # the CPU-bound service, about two minutes, no Redis needed
//	go run ./examples/overload -scenario io             # handlers waiting on a downstream pool
//	go run ./examples/overload -scenario drop           # the downstream slows to a third mid-flood, then recovers
//	go run ./examples/overload -scenario noisy          # another process takes part of the server's CPU mid-flood
//	go run ./examples/overload -scenario mixed          # handlers waiting on a downstream pool, then burning CPU
//	go run ./examples/overload -scenario tenant         # one API key flooding against 50 light ones (tenant-io, tenant-cpu, tenant-critical)
//	go run ./examples/overload -scenario all            # every scenario, one after the other
//	go run ./examples/overload -quick                   # about 20 seconds
//	go run ./examples/overload -redis 127.0.0.1:6379 -instances 3   # a fleet of three sharing Redis
//	go run ./examples/overload -scenario tenant -results docs/results   # and write docs/results/overload.{md,json}
//	go run ./examples/overload -watch 127.0.0.1:8090    # watch loadshed's server live at http://127.0.0.1:8090/debug/loadshed
//
// It starts the server as a process of its own with one CPU's worth of Go
// scheduler (GOMAXPROCS=1), pinned with taskset to one CPU while the load
// generator runs on another (without taskset it runs unpinned and says so).
// It measures the server's capacity with a closed loop, then offers an
// open-loop, mixed-priority load (Poisson arrivals, 10% critical, a timeout
// per request, loopback only) at 0.5×, 1×, 2×, 5× and 10× that capacity to
// each set-up, printing a line per step. At the end it prints a table per
// set-up, step and priority, the figures against the floor, checks
// loadshed's targets (saying when the machine was too busy for a step's
// figures to be trusted), and draws goodput by priority against offered
// load (SVG and PNG, in -out). docs/overload.md has the details.
//
// Refusing costs the server CPU whatever decides to refuse: reading the
// request and answering it. Each scenario measures what one refusal costs
// (a server pinned as the example server is, whose handler only writes a
// 503, refusing 4,400 requests a second), and judges each step's goodput
// against the bound its refusals leave: capacity × (1 − refusals per
// second × that cost), printed beside it; with a capacity change, phase
// by phase, a refusal while the noisy neighbour burns half the CPU
// costing twice as large a part of what is left.
//
// The tenant scenarios ask whether one client's flood takes everyone
// else's share. One API key (X-API-Key: heavy) offers 5×, 10× and 50× the
// capacity; 50 others (light-01 to light-50) together offer 0.1× of it,
// each far below its fair share; every request is GET /v1/charges, the
// arrivals Poisson, the timeout 1 s, each step 16 s measured. tenant-io
// runs them against 4 downstream connections of 40 ms, tenant-cpu
// against 10 ms of CPU a request (both about 100 requests a second, so
// that 50× is a pace the load generator keeps), and tenant-critical as
// tenant-io with a tenth of every client's requests critical (POST
// /v1/charges): from 10× on the heavy client's critical requests alone
// fill the capacity. The floor there is strict priority with max-min
// fairness within each priority, simulated on the same arrivals: the
// client owed the most within the highest priority waiting is served
// next (start-time fair queuing, each request costing the same), so
// every light request is served at about the unloaded latency and the
// heavy client gets all that the light ones leave; in the other scenarios,
// whose 64 keys ask alike, the floor treats every request as one client's.
// The targets there: the light clients served at least 99.9% and their p99
// within 1.5× the floor's, at each priority whose light requests the
// floor serves in full, and goodput at least 95% of the bound; the run
// prints the light clients' figures, the heavy client's share and the
// floor's.
//
// With -results DIR the run also writes each scenario's full table and
// figures into DIR/overload.md and DIR/overload.json (date, machine,
// commit, command), keeping the scenarios it did not run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/internal/runrecord"
	"github.com/loadshed/loadshed/shed"
)

func main() {
	serveIfChild()
	burnIfNeighbour()
	refuseIfChild()
	// This process is the load generator (its servers are the children
	// above). It collects garbage eight times less often than Go's
	// default, so that a collection on its one CPU less often sets it
	// behind the flood (stalledBy). In runs of tenant-io at 50x, 5 of 7
	// stalled with the default and 2 of 7 with this; its resident memory
	// was 170MB at most, against 250MB in a stall with the default.
	debug.SetGCPercent(800)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the run's settings.
type options struct {
	quick     bool
	scenarios []string
	// steps are the offered loads; without -steps (stepsSet), the tenant
	// scenarios run their own (forScenario).
	steps    []float64
	stepsSet bool
	warmup   time.Duration // of each step, not measured
	measure  time.Duration // of each step without a capacity change
	// measureSet: -step was given (otherwise the tenant scenarios measure
	// tenantMeasure).
	measureSet bool
	// before, during and after are the measured phases of a step with a
	// capacity change (drop, noisy): full capacity, less, full again.
	before, during, after time.Duration
	work                  time.Duration // CPU per request (cpu, noisy)
	pool                  int           // downstream connections (io, drop)
	latency               time.Duration // of a downstream call (io, drop)
	timeout               time.Duration // per request
	headroom              float64       // the blind limit, as a share of capacity
	out                   string
	redis                 string
	instances             int
	setups                []api.Protection
	// serverFlags are passed to loadshed's servers, to try other layer
	// settings.
	serverFlags []string
	// serverBin, when set, is the server to run (a build of
	// examples/server) instead of this binary.
	serverBin string
	// results, when set, is the directory of the generated results files
	// (overload.md, overload.json) this run's scenarios are written into.
	results string
	// args are the command's arguments, for the results file.
	args []string
	// watch, when set, is the address loadshed's server listens on (the
	// first instance's), so that its status page stays at one URL while
	// each step starts a fresh server.
	watch string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	scenarios := fs.String("scenario", scenarioCPU, "what kind of service to flood: "+strings.Join(scenarioNames, ", ")+", or all (comma-separated for several)")
	fs.BoolVar(&o.quick, "quick", false, "a short run (about 20s a scenario): steps 1× and 5× only (tenant: 5× and 50×), shorter steps")
	steps := fs.String("steps", "", "offered load per step, as multiples of capacity (default 0.5,1,2,5,10; -quick: 1,5); tenant: the heavy client's (default 5,10,50; -quick: 5,50)")
	fs.DurationVar(&o.measure, "step", 0, "measured length of each step without a capacity change (default 5s, tenant 16s; -quick 1.5s, tenant 2s)")
	phases := fs.String("phases", "", "drop and noisy: measured seconds at full capacity, with less, and at full capacity again (default 3s,3s,4s; -quick 1s,1.5s,2s)")
	fs.DurationVar(&o.work, "work", 2*time.Millisecond, "cpu, noisy: CPU each request burns on the server")
	fs.IntVar(&o.pool, "pool", 4, "io, drop: the downstream's connections")
	fs.DurationVar(&o.latency, "latency", 30*time.Millisecond, "io, drop: how long a downstream call holds its connection")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "client timeout per request")
	fs.Float64Var(&o.headroom, "blind-headroom", 0.85, "the priority-blind limit, as a share of the measured capacity (a user leaves headroom)")
	fs.StringVar(&o.out, "out", filepath.Join(os.TempDir(), "loadshed-overload"), "directory for the chart, the table and the servers' logs (a folder per scenario when there are several)")
	fs.StringVar(&o.redis, "redis", "", "Redis address: run a fleet sharing it (with -instances)")
	fs.IntVar(&o.instances, "instances", 1, "server processes; more than one needs -redis")
	setups := fs.String("setups", "none,blind-limit,loadshed", "set-ups to compare: none, blind-limit, loadshed (the default set-up), loadshed-cpubound (tuned for one CPU), loadshed-fifo (the default with fair share off)")
	fs.StringVar(&o.watch, "watch", "", "listen address of loadshed's server (e.g. 127.0.0.1:8090), to watch the flood live on its status page, /debug/loadshed; default a free port per step")
	serverFlags := fs.String("server-flags", "", "extra flags for loadshed's servers, space-separated (see go run ./examples/server -h)")
	fs.StringVar(&o.results, "results", "", "also write each scenario's results into this directory's overload.md and overload.json (docs/results from the repository's root), keeping the other scenarios' there")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.args = args
	for _, name := range strings.Split(*scenarios, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			o.scenarios = append(o.scenarios, scenarioNames...)
		case name == scenarioTenant:
			o.scenarios = append(o.scenarios, tenantScenarios...)
		case slices.Contains(scenarioNames, name):
			o.scenarios = append(o.scenarios, name)
		default:
			return o, fmt.Errorf("-scenario: unknown %q (want %s, %s or all)", name, strings.Join(scenarioNames, ", "), scenarioTenant)
		}
	}
	if *steps != "" {
		for _, f := range strings.Split(*steps, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 || v > 50 {
				return o, fmt.Errorf("-steps: %q is not a multiple of capacity in (0, 50]", f)
			}
			o.steps = append(o.steps, v)
		}
	}
	o.stepsSet = len(o.steps) > 0
	switch {
	case o.stepsSet:
	case o.quick:
		o.steps = []float64{1, 5}
	default:
		o.steps = []float64{0.5, 1, 2, 5, 10}
	}
	o.measureSet = o.measure != 0
	if o.measure == 0 {
		o.measure = 5 * time.Second
		if o.quick {
			o.measure = 1500 * time.Millisecond
		}
	}
	if o.measure < 0 || o.measure > 10*time.Minute {
		return o, fmt.Errorf("-step must be in (0, 10m], got %s", o.measure)
	}
	o.before, o.during, o.after = 3*time.Second, 3*time.Second, 4*time.Second
	if o.quick {
		o.before, o.during, o.after = time.Second, 1500*time.Millisecond, 2*time.Second
	}
	if *phases != "" {
		var ds []time.Duration
		for _, f := range strings.Split(*phases, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d < window || d > 5*time.Minute {
				return o, fmt.Errorf("-phases: %q is not a duration in [%s, 5m]", f, window)
			}
			ds = append(ds, d)
		}
		if len(ds) != 3 {
			return o, fmt.Errorf("-phases: want three durations, got %d", len(ds))
		}
		o.before, o.during, o.after = ds[0], ds[1], ds[2]
	}
	o.warmup = time.Second
	if o.quick {
		o.warmup = 500 * time.Millisecond
	}
	if o.work <= 0 || o.work > api.MaxWork {
		return o, fmt.Errorf("-work must be in (0, %s], got %s", api.MaxWork, o.work)
	}
	if o.pool < 1 || o.pool > 1024 {
		return o, fmt.Errorf("-pool must be 1 to 1024, got %d", o.pool)
	}
	if o.latency <= 0 || o.latency > api.MaxWork {
		return o, fmt.Errorf("-latency must be in (0, %s], got %s", api.MaxWork, o.latency)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("-timeout must be positive, got %s", o.timeout)
	}
	if !(o.headroom > 0 && o.headroom <= 2) {
		return o, fmt.Errorf("-blind-headroom must be in (0, 2], got %v", o.headroom)
	}
	if o.instances < 1 || o.instances > 8 {
		return o, fmt.Errorf("-instances must be 1 to 8, got %d", o.instances)
	}
	if o.instances > 1 && o.redis == "" {
		return o, errors.New("-instances above 1 needs -redis: the instances share their counts through it")
	}
	if o.watch != "" {
		if _, _, err := net.SplitHostPort(o.watch); err != nil {
			return o, fmt.Errorf("-watch: %w", err)
		}
	}
	o.serverFlags = strings.Fields(*serverFlags)
	for _, s := range strings.Split(*setups, ",") {
		p, err := api.ParseProtection(strings.TrimSpace(s))
		if err != nil {
			return o, fmt.Errorf("-setups: %w", err)
		}
		o.setups = append(o.setups, p)
	}
	return o, nil
}

// forScenario is o as scenario sc runs it: the tenant scenarios' own steps
// and step length, unless given.
func (o options) forScenario(sc scenario) options {
	if sc.tenant == nil {
		return o
	}
	if !o.stepsSet {
		o.steps = tenantSteps
		if o.quick {
			o.steps = []float64{5, 50}
		}
	}
	if !o.measureSet {
		o.measure = tenantMeasure
		if o.quick {
			o.measure = 2 * time.Second
		}
	}
	return o
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "overload:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pin := pinCPUs()
	// One rate for the work of every server of the run (api.BurnRateEnv):
	// the capacity is measured on one and judged on the others.
	if os.Getenv(api.BurnRateEnv) == "" {
		os.Setenv(api.BurnRateEnv, strconv.FormatFloat(api.MeasureBurnRate(), 'g', -1, 64))
	}
	if pin.note != "" {
		fmt.Fprintln(stdout, "note:", pin.note)
	} else {
		fmt.Fprintf(stdout, "server on CPU %d (GOMAXPROCS=1), load generator on CPU %d\n", pin.serverCPU, pin.loadCPU)
	}
	if o.watch != "" {
		fmt.Fprintf(stdout, "watch loadshed's server live: http://%s/debug/loadshed (the page reconnects as each step starts a fresh server)\n", o.watch)
	}
	for _, name := range o.scenarios {
		dir := o.out
		if len(o.scenarios) > 1 {
			dir = filepath.Join(o.out, name)
		}
		rep, err := runScenario(ctx, o, pin, name, dir, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "overload:", err)
			return 1
		}
		rep.printTables(stdout)
		rep.printFloorTable(stdout)
		rep.printTenantTable(stdout)
		rep.printTargets(stdout)
		if err := rep.save(dir); err != nil {
			fmt.Fprintln(stderr, "overload:", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nchart: %s\n       %s\ntable: %s\n", filepath.Join(dir, "overload.svg"), filepath.Join(dir, "overload.png"), filepath.Join(dir, "overload.txt"))
		// Each scenario as it ends: an interrupted run keeps those done.
		if o.results != "" {
			if err := writeResults(o.results, o.args, []*report{rep}); err != nil {
				fmt.Fprintln(stderr, "overload:", err)
				return 1
			}
			fmt.Fprintf(stdout, "results: %s\n         %s\n", filepath.Join(o.results, resultsMD), filepath.Join(o.results, resultsJSON))
		}
	}
	return 0
}

// runScenario measures the capacity, then runs every step against every
// set-up, for one scenario.
func runScenario(ctx context.Context, o options, pin pinning, name, dir string, stdout io.Writer) (*report, error) {
	sc, err := newScenario(name, o)
	if err != nil {
		return nil, err
	}
	o = o.forScenario(sc)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-out: %w", err)
	}
	for _, setup := range append([]api.Protection{"calibrate"}, o.setups...) {
		os.Remove(filepath.Join(dir, "server-"+string(setup)+".log")) // each run's logs only
	}
	env := scenarioEnv{pin: pin, opts: o}
	measure := o.measure
	if sc.change != nil {
		measure = o.before + o.during + o.after
	}
	rep := &report{opts: o, pin: pin, sc: sc, measure: measure, loadBefore: runrecord.LoadAverage(), started: time.Now()}
	fmt.Fprintf(stdout, "\nscenario %s: %s (load average %s)\n", sc.name, sc.about, rep.loadBefore)

	// Capacity and unloaded latency, on the unprotected server; with a
	// change, the capacity while it lasts too.
	if err := withServers(ctx, o, pin, sc, api.Unprotected, 0, dir, "calibrate", func(servers []*server) error {
		bases := basesOf(servers)
		c := newLoadClient(bases, sc.work, o.timeout, 64)
		defer c.close()
		d := 1500 * time.Millisecond
		if o.quick {
			d = 750 * time.Millisecond
		}
		c.closedLoop(ctx, 1, 300*time.Millisecond, shed.Default) // warm the connections and the caches
		solo := c.closedLoop(ctx, 1, d, shed.Default)
		rep.unloadedP50, rep.unloadedP99 = latencies(solo)
		// Enough clients to keep every connection of the pool busy.
		clients := max(8, 4*max(1, sc.pool))
		// served is what a closed loop of n clients answered per second
		// over length.
		served := func(n int, length time.Duration) float64 {
			ok := 0
			for _, s := range c.closedLoop(ctx, n, length, shed.Default) {
				if s.res == resOK {
					ok++
				}
			}
			return float64(ok) / length.Seconds()
		}
		closed := func() float64 {
			c.closedLoop(ctx, clients, 300*time.Millisecond, shed.Default)
			return served(clients, 2*d)
		}
		// The capacity is what every step is judged against: a machine
		// busy while it is measured makes every figure after it wrong.
		pids := []int{servers[0].cmd.Process.Pid}
		before := readCPUTimes(pin.serverCPU, pids...)
		// Where the capacity is the CPU's, the speed it was measured at.
		rep.workCPU, _ = timeWork(bases[:1], !sc.poolKnown(), func() { rep.capacity = closed() })
		after := readCPUTimes(pin.serverCPU, pids...)
		rep.calibration = quietBetween(before, after, pin.taskset != "", after.processes-before.processes, 0, flood{})
		// On a pinned CPU-bound server the closed loop must keep the CPU
		// busy, or the capacity reads low (a pool's capacity is known,
		// below).
		rep.calibration.saturating = pin.taskset != "" && sc.pool == 0
		if sc.mixed() {
			// The floor's servers: the fewest clients that serve the
			// capacity (fewestServing).
			for n := 4; n <= 20; n += 2 {
				rep.loopPoints = append(rep.loopPoints, loopPoint{clients: n, throughput: served(n, d*2/3)})
			}
		}
		rep.capacityChanged = rep.capacity
		if sc.change != nil {
			stop, err := sc.change.start(ctx, env, bases)
			if err != nil {
				return err
			}
			before := readCPUTimes(pin.serverCPU, pids...)
			rep.capacityChanged = closed()
			after := readCPUTimes(pin.serverCPU, pids...)
			neighbour, err := stop()
			if err != nil {
				return err
			}
			changed := quietBetween(before, after, pin.taskset != "", after.processes-before.processes, neighbour, flood{})
			rep.calibration.foreign = max(rep.calibration.foreign, changed.foreign)
			rep.calibration.steal = max(rep.calibration.steal, changed.steal)
		}
		return ctx.Err()
	}); err != nil {
		return nil, err
	}
	if rep.capacity < 10 || rep.capacityChanged < 2 {
		return nil, fmt.Errorf("measured capacity is %.0f requests/s (%.0f/s with the change); is the machine that busy?", rep.capacity, rep.capacityChanged)
	}
	measuredNote := ""
	if sc.poolKnown() {
		// A downstream pool's capacity is known exactly: its connections
		// over a call's latency, the CPU playing no part. The closed loop,
		// whose clients need the CPU to turn a request round, can only
		// come in under it, and more so on a busy machine.
		measuredNote = fmt.Sprintf(" (%d connections / %s; %.0f/s measured in a closed loop", sc.pool, sc.latency, rep.capacity)
		if sc.change != nil {
			measuredNote += fmt.Sprintf(", %.0f/s with the change", rep.capacityChanged)
		}
		measuredNote += ")"
		rep.capacity = float64(sc.pool) / sc.latency.Seconds()
		rep.capacityChanged = rep.capacity
		if sc.change != nil && sc.change.factor > 0 {
			rep.capacityChanged = rep.capacity / sc.change.factor
		}
		rep.calibration = quiet{} // the capacity does not depend on it
	}
	rep.floorServers = sc.floorServers(fewestServing(rep.loopPoints, rep.capacity))
	if sc.mixed() {
		var sweep []string
		for _, p := range rep.loopPoints {
			sweep = append(sweep, fmt.Sprintf("%d: %.0f/s", p.clients, p.throughput))
		}
		measuredNote = fmt.Sprintf(" (measured in a closed loop; the floor serves %d at once, the fewest clients that serve it in closed loops of %s)",
			rep.floorServers, strings.Join(sweep, ", "))
	}
	if rep.calibration.saturating && rep.calibration.known {
		measuredNote = fmt.Sprintf(" (the server busy %.1f%% of the time meanwhile)", 100*rep.calibration.serverCPU)
	}
	fmt.Fprintf(stdout, "capacity %.0f requests/s%s; unloaded latency p50 %s, p99 %s\n", rep.capacity, measuredNote, ms(rep.unloadedP50), ms(rep.unloadedP99))
	if ok, why := rep.calibration.trusted(); !ok {
		fmt.Fprintf(stdout, "the capacity was measured on a busy machine (%s): no figure of this run is to be trusted\n", why)
	}
	if sc.change != nil {
		fmt.Fprintf(stdout, "with %s: capacity %.0f requests/s (%.1f%%), from %s to %s of each step's %s measured\n",
			sc.change.about, rep.capacityChanged, 100*rep.capacityChanged/rep.capacity, o.before, o.before+o.during, measure)
	}

	// What a refusal costs the server's CPU, measured now, on this
	// machine as it is: the bound of every step's goodput (refusal.go).
	rounds, length := 2, 3*time.Second
	if o.quick {
		rounds, length = 1, time.Second
	}
	refuserLog := filepath.Join(dir, "server-refuser.log")
	if err := os.WriteFile(refuserLog, nil, 0o644); err != nil {
		return nil, err
	}
	refusalCost := func(rounds int) (time.Duration, error) {
		logf, err := os.OpenFile(refuserLog, os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return 0, err
		}
		defer logf.Close()
		cost, err := measureRefusalCost(ctx, pin, logf, rounds, length)
		if err != nil {
			return 0, fmt.Errorf("measuring what a refusal costs: %w", err)
		}
		return cost, nil
	}
	rep.refusalCost, err = refusalCost(rounds)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "a refusal costs the server %s of CPU (net/http's least: a 503, %d a second over %d connections, the least of %d × %s); each goodput is judged against capacity × (1 − refusals/s × that)\n",
		us(rep.refusalCost), refusalRate, refusalConns, rounds, length)

	// Steps outer, set-ups inner: the set-ups compared at one load run
	// within seconds of each other, so a machine whose other work comes and
	// goes treats them alike. Each load's steps are bracketed by a round of
	// the refusal's measurement, so that a machine that changed under them
	// is seen (machine.go); a load's lines are printed once the round
	// after it is in.
	blindRate := int64(o.headroom*rep.capacity/float64(o.instances) + 0.5)
	before := rep.refusalCost
	for _, mult := range o.steps {
		first := len(rep.steps)
		for _, setup := range o.setups {
			// A fresh server per step: no step inherits the last one's
			// backlog (an unprotected server still burns CPU for requests
			// whose clients gave up) or its shedding state. The warm-up
			// covers the start.
			err := withServers(ctx, o, pin, sc, setup, blindRate, dir, string(setup), func(servers []*server) error {
				st, err := runStep(ctx, rep, env, servers, setup, mult)
				if err != nil {
					return err
				}
				rep.steps = append(rep.steps, st)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		after, err := refusalCost(1)
		if err != nil {
			return nil, err
		}
		for i := first; i < len(rep.steps); i++ {
			rep.steps[i].quiet.refusalCost = rep.refusalCost
			rep.steps[i].quiet.refusalAround = [2]time.Duration{before, after}
			fmt.Fprintln(stdout, rep.steps[i].progressLine())
		}
		before = after
	}
	rep.loadAfter = runrecord.LoadAverage()
	return rep, nil
}

// openConnsFor sizes the connections opened before each step: the offered
// rate times this. The flood's first second at 10x took about 1,150 on
// the one-CPU server (2x 140, 5x 490); at 250ms of the offered rate, 1,208.
const openConnsFor = 250 * time.Millisecond

// runStep floods servers at mult × capacity and judges the outcome
// against the floor on the same arrivals.
func runStep(ctx context.Context, rep *report, env scenarioEnv, servers []*server, setup api.Protection, mult float64) (step, error) {
	o, sc := rep.opts, rep.sc
	bases := basesOf(servers)
	offered := mult * rep.capacity
	pick := pickMixed
	if sc.tenant != nil {
		offered, pick = sc.tenant.offered(mult, rep.capacity), sc.tenant.pick(mult)
	}
	maxConns := int(offered*o.timeout.Seconds()) + 64
	c := newLoadClient(bases, sc.work, o.timeout, maxConns)
	defer c.close()
	if sc.tenant != nil {
		c.keys = sc.tenant.keys()
	}
	if err := c.openConns(ctx, min(maxConns, int(offered*openConnsFor.Seconds()))); err != nil {
		return step{}, err
	}
	var changes []*change
	var neighbourCPU time.Duration
	if sc.change != nil {
		var stop func() (time.Duration, error)
		changes = []*change{
			{at: o.warmup + o.before, apply: func() (err error) {
				stop, err = sc.change.start(ctx, env, bases)
				return err
			}},
			{at: o.warmup + o.before + o.during, apply: func() (err error) {
				if stop == nil {
					return nil
				}
				neighbourCPU, err = stop()
				stop = nil
				return err
			}},
		}
		defer func() {
			if stop != nil { // interrupted before the second change
				stop()
			}
		}()
	}
	var pids []int
	for _, s := range servers {
		pids = append(pids, s.cmd.Process.Pid)
	}
	before := readCPUTimes(env.pin.serverCPU, pids...)
	usage := sampleUsage(ctx, bases[0])
	// The work's CPU time, only where the calibration's is known to
	// compare it with.
	var fl flood
	work, workOK := timeWork(bases, rep.workCPU > 0, func() {
		fl = c.openLoop(ctx, offered, o.warmup, rep.measure, maxConns, uint64(mult*1000), changes, pick)
	})
	after := readCPUTimes(env.pin.serverCPU, pids...)
	fleet := usage()
	if ctx.Err() != nil {
		return step{}, ctx.Err()
	}
	for _, ch := range changes {
		if ch.err != nil {
			return step{}, ch.err
		}
	}
	samples := measured(fl.samples, o.warmup)
	st := step{setup: setup, mult: mult, offered: offered, stats: summarise(samples, rep.measure), fleetUsage: fleet,
		quiet: quietBetween(before, after, env.pin.taskset != "", after.processes-before.processes, neighbourCPU, fl)}
	if workOK {
		st.quiet.speed = speedChange(rep.workCPU, work)
	}

	// The floor, on the same arrivals (the warm-up's too: it fills the
	// queues as it did in the run).
	arr := arrivalsOf(fl.samples)
	model := floorModel{servers: rep.floorServers, timeout: o.timeout, end: o.warmup + rep.measure,
		service: time.Duration(float64(rep.floorServers) / rep.capacity * float64(time.Second)), fair: sc.tenant != nil}
	st.capacity = rep.capacity
	critRate := offered * mix[shed.Critical]
	criticalFitsChanged := criticalFits(critRate, rep.capacityChanged)
	if len(changes) == 2 {
		t1, t2 := changes[0].applied, changes[1].applied
		model.slow = []slowdown{{from: t1, to: t2, factor: rep.capacity / rep.capacityChanged}}
		// The capacity the step had, on average over what was measured.
		changed := (t2 - t1).Seconds()
		st.capacity = (rep.capacity*(rep.measure.Seconds()-changed) + rep.capacityChanged*changed) / rep.measure.Seconds()
	}
	var floorLat []time.Duration
	st.floor, floorLat = model.floor(arr, o.warmup, rep.measure)
	if len(changes) == 2 {
		end := o.warmup + rep.measure
		t1, t2 := changes[0].applied, changes[1].applied
		after := refusalPrice{cost: rep.refusalCost, cpuShare: 1}
		during := after
		if sc.change.takesCPU {
			during.cpuShare = rep.capacityChanged / rep.capacity
		}
		st.recoveries = []recovery{
			recoveryAfter(fl.samples, arr, floorLat, t1, t2, rep.capacityChanged, criticalFitsChanged, during),
			recoveryAfter(fl.samples, arr, floorLat, t2, end, rep.capacity, criticalFits(critRate, rep.capacity), after),
		}
		st.bound = boundWithChange(samples, o.warmup, end, t1, t2, rep.capacity, rep.capacityChanged, after, during)
		st.steady = summarise(steady(samples, changes, !criticalFitsChanged), rep.measure)
		st.unchanged = summarise(steady(samples, changes, true), rep.measure)
	} else {
		st.steady, st.unchanged = st.stats, st.stats
	}
	all := st.stats[shed.NumPriorities]
	st.refusals = float64(all.counts[resThrottle]+all.counts[resShed]) / rep.measure.Seconds()
	if len(changes) != 2 {
		st.bound = goodputBound(st.capacity, st.refusals, rep.refusalCost)
	}
	if sc.tenant != nil {
		t := summariseTenant(samples, rep.measure)
		st.tenant = &t
	}
	return st, nil
}

func basesOf(servers []*server) []string {
	var bases []string
	for _, s := range servers {
		bases = append(bases, s.base)
	}
	return bases
}

// fleetRun numbers the fleets a run starts, for their Redis keys.
var fleetRun atomic.Int64

// withServers runs f against o.instances fresh servers of scenario sc with
// protection p.
func withServers(ctx context.Context, o options, pin pinning, sc scenario, p api.Protection, rate int64, dir, logName string, f func(servers []*server) error) error {
	logf, err := os.OpenFile(filepath.Join(dir, "server-"+logName+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for i := range o.instances {
		args := append([]string{"-protect", string(p)}, sc.serverArgs()...)
		if rate > 0 && p == api.BlindLimit {
			args = append(args, "-global-rate", strconv.FormatInt(rate, 10))
		}
		if isLoadshed(p) {
			args = append(args, o.serverFlags...)
			if o.watch != "" && i == 0 {
				args = append(args, "-addr", o.watch) // after startServer's own -addr, so it wins
			}
		}
		if o.redis != "" {
			// Each step's fleet has keys of its own: the last step's killed
			// instances must not count in this one's totals.
			args = append(args, "-redis", o.redis, "-instance", fmt.Sprintf("overload-%d", i),
				"-fleet-prefix", fmt.Sprintf("loadshed:overload:%d:%d:", os.Getpid(), fleetRun.Add(1)))
		}
		s, err := startServer(ctx, pin, o.serverBin, logf, args...)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	return f(servers)
}

// latencies is the p50 and p99 of the successful samples.
func latencies(samples []sample) (p50, p99 time.Duration) {
	var ds []time.Duration
	for _, s := range samples {
		if s.res == resOK {
			ds = append(ds, s.latency)
		}
	}
	return percentile(ds, 0.5), percentile(ds, 0.99)
}

// sampleUsage reads the fleet layer's usage by priority from a server's
// /metrics every 250ms until the returned function is called, which
// returns the mean of each (nil when the server reports none).
func sampleUsage(ctx context.Context, base string) func() []float64 {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan []float64, 1)
	go func() {
		var sum [shed.NumPriorities]float64
		n := 0
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if n == 0 {
					done <- nil
					return
				}
				out := make([]float64, shed.NumPriorities)
				for i := range out {
					out[i] = sum[i] / float64(n)
				}
				done <- out
				return
			case <-t.C:
			}
			m, err := scrape(base)
			if err != nil {
				continue
			}
			seen := false
			for _, p := range shed.Priorities() {
				for series, v := range m {
					if strings.HasPrefix(series, "loadshed_layer_gauge{") && strings.Contains(series, `name="usage"`) &&
						strings.Contains(series, `priority="`+p.String()+`"`) {
						sum[p.Index()] += v
						seen = true
					}
				}
			}
			if seen {
				n++
			}
		}
	}()
	return func() []float64 { cancel(); return <-done }
}
