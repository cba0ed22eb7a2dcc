// Command overload floods the example server (examples/server) and shows
// what survives: the same API with no protection, behind a priority-blind
// rate limit at its capacity, and behind loadshed's layers.
//
//	go run ./examples/overload                          # about two minutes, no Redis needed
//	go run ./examples/overload -quick                   # about 20 seconds
//	go run ./examples/overload -redis 127.0.0.1:6379 -instances 3   # a fleet of three sharing Redis
//
// It starts the server as a process of its own with one CPU's worth of Go
// scheduler (GOMAXPROCS=1), pinned with taskset to one CPU while the load
// generator runs on another (without taskset it runs unpinned and says so).
// It measures the server's capacity with a closed loop, then offers an
// open-loop, mixed-priority load (Poisson arrivals, 10% critical, a timeout
// per request, loopback only) at 0.5×, 1×, 2×, 5× and 10× that capacity to
// each set-up, printing a line per step. At the end it prints a table per
// set-up, step and priority, checks loadshed's targets at 5×, and draws
// goodput by priority against offered load (SVG and PNG, in -out).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

func main() {
	serveIfChild()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the run's settings.
type options struct {
	quick     bool
	steps     []float64
	warmup    time.Duration // of each step, not measured
	measure   time.Duration // of each step
	work      time.Duration // CPU per request
	timeout   time.Duration // per request
	out       string
	redis     string
	instances int
	setups    []api.Protection
	// serverFlags are passed to the loadshed set-up's servers, to try
	// other layer settings.
	serverFlags []string
	// serverBin, when set, is the server to run (a build of
	// examples/server) instead of this binary.
	serverBin string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.quick, "quick", false, "a short run (about 20s): steps 1× and 5× only, shorter steps")
	steps := fs.String("steps", "", "offered load per step, as multiples of capacity (default 0.5,1,2,5,10; -quick: 1,5)")
	fs.DurationVar(&o.measure, "step", 0, "measured length of each step (default 5s; -quick 1.5s)")
	fs.DurationVar(&o.work, "work", 2*time.Millisecond, "CPU each request burns on the server")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "client timeout per request")
	fs.StringVar(&o.out, "out", filepath.Join(os.TempDir(), "loadshed-overload"), "directory for the chart, the table and the servers' logs")
	fs.StringVar(&o.redis, "redis", "", "Redis address: run a fleet sharing it (with -instances)")
	fs.IntVar(&o.instances, "instances", 1, "server processes; more than one needs -redis")
	setups := fs.String("setups", "none,blind-limit,loadshed", "set-ups to compare")
	serverFlags := fs.String("server-flags", "", "extra flags for the loadshed set-up's servers, space-separated (see go run ./examples/server -h)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *steps != "":
		for _, f := range strings.Split(*steps, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 || v > 50 {
				return o, fmt.Errorf("-steps: %q is not a multiple of capacity in (0, 50]", f)
			}
			o.steps = append(o.steps, v)
		}
	case o.quick:
		o.steps = []float64{1, 5}
	default:
		o.steps = []float64{0.5, 1, 2, 5, 10}
	}
	if o.measure == 0 {
		o.measure = 5 * time.Second
		if o.quick {
			o.measure = 1500 * time.Millisecond
		}
	}
	o.warmup = time.Second
	if o.quick {
		o.warmup = 500 * time.Millisecond
	}
	if o.work <= 0 || o.work > api.MaxWork {
		return o, fmt.Errorf("-work must be in (0, %s], got %s", api.MaxWork, o.work)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("-timeout must be positive, got %s", o.timeout)
	}
	if o.instances < 1 || o.instances > 8 {
		return o, fmt.Errorf("-instances must be 1 to 8, got %d", o.instances)
	}
	if o.instances > 1 && o.redis == "" {
		return o, errors.New("-instances above 1 needs -redis: the instances share their counts through it")
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
	rep, err := runAll(ctx, o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "overload:", err)
		return 1
	}
	rep.printTables(stdout)
	rep.printTargets(stdout)
	if err := rep.save(o.out); err != nil {
		fmt.Fprintln(stderr, "overload:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nchart: %s\n       %s\ntable: %s\n", filepath.Join(o.out, "overload.svg"), filepath.Join(o.out, "overload.png"), filepath.Join(o.out, "overload.txt"))
	return 0
}

// runAll measures the capacity, then runs every step against every set-up.
func runAll(ctx context.Context, o options, stdout io.Writer) (*report, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, fmt.Errorf("-out: %w", err)
	}
	for _, setup := range append([]api.Protection{"calibrate"}, o.setups...) {
		os.Remove(filepath.Join(o.out, "server-"+string(setup)+".log")) // each run's logs only
	}
	pin := pinCPUs()
	rep := &report{opts: o, pin: pin}
	if pin.note != "" {
		fmt.Fprintln(stdout, "note:", pin.note)
	} else {
		fmt.Fprintf(stdout, "server on CPU %d (GOMAXPROCS=1), load generator on CPU %d\n", pin.serverCPU, pin.loadCPU)
	}

	// Capacity and unloaded latency, on the unprotected server.
	if err := withServers(ctx, o, pin, api.Unprotected, 0, "calibrate", func(bases []string) error {
		c := newLoadClient(bases, o.work, o.timeout, 64)
		defer c.close()
		d := 1500 * time.Millisecond
		if o.quick {
			d = 750 * time.Millisecond
		}
		c.closedLoop(ctx, 1, 300*time.Millisecond, shed.Default) // warm the connections and the caches
		solo := c.closedLoop(ctx, 1, d, shed.Default)
		rep.unloadedP50, rep.unloadedP99 = latencies(solo)
		c.closedLoop(ctx, 8, 300*time.Millisecond, shed.Default)
		full := c.closedLoop(ctx, 8, 2*d, shed.Default)
		ok := 0
		for _, s := range full {
			if s.res == resOK {
				ok++
			}
		}
		rep.capacity = float64(ok) / (2 * d).Seconds()
		return ctx.Err()
	}); err != nil {
		return nil, err
	}
	if rep.capacity < 10 {
		return nil, fmt.Errorf("measured capacity is %.0f requests/s; is the machine that busy?", rep.capacity)
	}
	fmt.Fprintf(stdout, "capacity %.0f requests/s (%s of CPU each); unloaded latency p50 %s, p99 %s\n",
		rep.capacity, o.work, ms(rep.unloadedP50), ms(rep.unloadedP99))

	// Steps outer, set-ups inner: the set-ups compared at one load run
	// within seconds of each other, so a machine whose other work comes and
	// goes treats them alike.
	rate := int64(rep.capacity/float64(o.instances) + 0.5)
	for _, mult := range o.steps {
		for _, setup := range o.setups {
			// A fresh server per step: no step inherits the last one's
			// backlog (an unprotected server still burns CPU for requests
			// whose clients gave up) or its shedding state. The warm-up
			// covers the start.
			err := withServers(ctx, o, pin, setup, rate, string(setup), func(bases []string) error {
				offered := mult * rep.capacity
				maxConns := int(offered*o.timeout.Seconds()) + 64
				c := newLoadClient(bases, o.work, o.timeout, maxConns)
				defer c.close()
				usage := sampleUsage(ctx, bases[0])
				samples := c.openLoop(ctx, offered, o.warmup, o.measure, maxConns, uint64(mult*1000))
				fleet := usage()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				st := step{setup: setup, mult: mult, offered: offered, stats: summarise(samples, o.measure), fleetUsage: fleet}
				rep.steps = append(rep.steps, st)
				fmt.Fprintln(stdout, st.progressLine())
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// fleetRun numbers the fleets a run starts, for their Redis keys.
var fleetRun atomic.Int64

// withServers runs f against o.instances fresh servers with protection p.
func withServers(ctx context.Context, o options, pin pinning, p api.Protection, rate int64, logName string, f func(bases []string) error) error {
	logf, err := os.OpenFile(filepath.Join(o.out, "server-"+logName+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
	var bases []string
	for i := range o.instances {
		args := []string{"-protect", string(p)}
		if rate > 0 && p == api.BlindLimit {
			args = append(args, "-global-rate", strconv.FormatInt(rate, 10))
		}
		if p == api.Loadshed {
			args = append(args, o.serverFlags...)
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
		bases = append(bases, s.base)
	}
	return f(bases)
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
