package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loadshed/loadshed/internal/procstat"
)

// A scenario is a kind of service and what happens to it during a flood.
// The protected set-up is the same in all of them: the point is that one
// default protects every kind of service without being told which.
type scenario struct {
	name  string
	about string
	// work is the CPU each request burns.
	work time.Duration
	// pool is the downstream's connections (0: none; the CPU is the
	// bottleneck), latency one call's.
	pool    int
	latency time.Duration
	// change, when set, takes capacity away mid-flood and gives it back.
	change *capacityChange
	// tenant, when set, is the traffic of one heavy client against many
	// light ones (tenant.go) instead of the usual mix of 64 alike.
	tenant *tenantTraffic
}

// capacityChange is a stretch of a flood during which the service has
// less capacity.
type capacityChange struct {
	about string
	// factor, when known, is how many times slower the service runs while
	// the change lasts (0: measured in the calibration).
	factor float64
	// takesCPU: the change takes part of the server's CPU (a neighbour
	// that burns it), so that a refusal while it lasts costs a larger part
	// of the capacity left.
	takesCPU bool
	// start takes the capacity away from the servers at bases; the
	// function it returns gives it back and says how much CPU time the
	// change itself used on the server's CPU (a neighbour's).
	start func(ctx context.Context, env scenarioEnv, bases []string) (stop func() (time.Duration, error), err error)
}

// scenarioEnv is what a change needs of the run.
type scenarioEnv struct {
	pin  pinning
	opts options
}

// Scenario names, for -scenario.
const (
	scenarioCPU   = "cpu"
	scenarioIO    = "io"
	scenarioDrop  = "drop"
	scenarioNoisy = "noisy"
	scenarioMixed = "mixed"
	// The tenant scenarios, "tenant" for the three.
	scenarioTenant         = "tenant"
	scenarioTenantIO       = "tenant-io"
	scenarioTenantCPU      = "tenant-cpu"
	scenarioTenantCritical = "tenant-critical"
)

var scenarioNames = []string{scenarioCPU, scenarioIO, scenarioDrop, scenarioNoisy, scenarioMixed, scenarioTenantIO, scenarioTenantCPU, scenarioTenantCritical}

// tenantScenarios are the scenarios -scenario tenant runs.
var tenantScenarios = []string{scenarioTenantIO, scenarioTenantCPU, scenarioTenantCritical}

// mixedPool is the downstream's connections in the mixed scenario: with
// 30ms calls and 2ms of CPU a request, the pool alone (533/s) and the CPU
// alone (about 480/s) would saturate at nearly the same load, so neither
// is the obvious bottleneck. Together, on one CPU, they serve about half
// that: a call's connection is released only once its goroutine runs
// again, behind the requests burning the CPU (the connections were held
// 45ms on average for 30ms calls in the calibration), so the capacity is
// measured, not derived.
const mixedPool = 16

// dropFactor is how much slower the downstream runs in the drop scenario.
const dropFactor = 3

// newScenario builds the scenario called name with the run's settings.
func newScenario(name string, o options) (scenario, error) {
	switch name {
	case scenarioCPU:
		return scenario{name: name, work: o.work,
			about: fmt.Sprintf("CPU-bound: each request burns %s of the server's one CPU", o.work)}, nil
	case scenarioIO:
		return scenario{name: name, pool: o.pool, latency: o.latency,
			about: fmt.Sprintf("I/O-bound: each request holds one of %d downstream connections for %s; the CPU is nearly idle", o.pool, o.latency)}, nil
	case scenarioDrop:
		return scenario{name: name, pool: o.pool, latency: o.latency,
			about:  fmt.Sprintf("capacity drop: as io (%d connections, %s a call), the downstream at a third of its speed mid-flood, then recovered", o.pool, o.latency),
			change: &capacityChange{about: fmt.Sprintf("downstream %d× slower", dropFactor), factor: dropFactor, start: slowDownstream}}, nil
	case scenarioNoisy:
		return scenario{name: name, work: o.work,
			about:  fmt.Sprintf("noisy neighbour: as cpu (%s a request), another process burns the server's CPU mid-flood", o.work),
			change: &capacityChange{about: "a CPU burner on the server's CPU", takesCPU: true, start: startNeighbour}}, nil
	case scenarioMixed:
		return scenario{name: name, work: o.work, pool: mixedPool, latency: o.latency,
			about: fmt.Sprintf("mixed: each request holds one of %d downstream connections for %s, then burns %s of the server's one CPU", mixedPool, o.latency, o.work)}, nil
	case scenarioTenantIO:
		return scenario{name: name, pool: o.pool, latency: tenantLatency, tenant: &tenantTraffic{},
			about: fmt.Sprintf("one client's flood: each request holds one of %d downstream connections for %s, one API key at the step's multiple of capacity, %d others together at %.1f×, every request GET /v1/charges", o.pool, tenantLatency, lightKeys, lightLoad)}, nil
	case scenarioTenantCPU:
		return scenario{name: name, work: tenantWork, tenant: &tenantTraffic{},
			about: fmt.Sprintf("one client's flood: each request burns %s of the server's one CPU, one API key at the step's multiple of capacity, %d others together at %.1f×, every request GET /v1/charges", tenantWork, lightKeys, lightLoad)}, nil
	case scenarioTenantCritical:
		return scenario{name: name, pool: o.pool, latency: tenantLatency, tenant: &tenantTraffic{critical: tenantCritical},
			about: fmt.Sprintf("one client's flood, partly critical: as tenant-io, but %.0f%% of every client's requests critical (POST /v1/charges), the heavy one's too", 100*tenantCritical)}, nil
	}
	return scenario{}, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(scenarioNames, ", "))
}

// serverArgs are the example server's flags for the scenario.
func (sc scenario) serverArgs() []string {
	if sc.pool == 0 {
		return nil
	}
	return []string{"-downstream-pool", strconv.Itoa(sc.pool), "-downstream-latency", sc.latency.String()}
}

// floorServers is how many requests the service can work on at once in
// the floor's model: one on one CPU, one per downstream connection. A
// service that needs both is neither one server nor a pool's worth: its
// fewest clients that serve its capacity, measured (fewestServing), are.
func (sc scenario) floorServers(fewest int) int {
	switch {
	case sc.mixed():
		return max(1, fewest)
	case sc.pool > 0:
		return sc.pool
	}
	return 1
}

// mixed reports whether the service needs both a downstream pool and the
// CPU: its capacity is measured, not the pool's, and the fewest in flight
// that serve it too.
func (sc scenario) mixed() bool { return sc.pool > 0 && sc.work > 0 }

// loopPoint is what a closed loop of clients clients served per second.
type loopPoint struct {
	clients    int
	throughput float64
}

// fewestServing is the fewest clients of the closed loops in points that
// served the capacity, within capacitySpread (the goodput target's
// margin): the least a scheduler of this service must keep in flight to
// serve what the floor serves. The floor's servers are that many, each
// answering in servers / capacity. A service that needs both a pool and
// the CPU takes longer per request the more it has in flight, and its
// throughput keeps rising with it well past where latency starts to (on
// a 2-CPU VM: 190/s at 10 clients, 230-259/s at 16, the capacity about
// 245/s), so no fewer will do:
//
//   - the knee of throughput per latency (throughput² / clients,
//     Kleinrock's power) is flat from 10 to 18 clients there, and a loop
//     of a second is noisy: the fewest within 5% of the best read 10, 12,
//     16 and 18 in five calibrations, and the floor's latency moved with
//     them (on one run's arrivals, its critical p99 from 76ms at 10 to
//     138ms at 18). The floor it gave served the capacity with 10 in
//     flight at 41ms a request, where the service serves 190/s at 52ms:
//     faster than the service on both counts, and a target no scheduler
//     of it could meet;
//   - Little's law with the unloaded latency (8 for the mixed service)
//     answers faster still.
//
// With none within the margin, the loop that served the most.
func fewestServing(points []loopPoint, capacity float64) int {
	n, best := 0, loopPoint{}
	for _, p := range points {
		if p.clients <= 0 {
			continue
		}
		if p.throughput >= (1-capacitySpread)*capacity && (n == 0 || p.clients < n) {
			n = p.clients
		}
		if p.throughput > best.throughput {
			best = p
		}
	}
	if n == 0 {
		return best.clients
	}
	return n
}

// capacitySpread is how near the capacity a closed loop must come to
// serve it: the goodput target's margin.
const capacitySpread = 0.05

// poolKnown reports whether the capacity is the pool's, known without
// measuring: its connections over a call's latency, the CPU playing no
// part.
func (sc scenario) poolKnown() bool { return sc.pool > 0 && !sc.mixed() }

// slowDownstream makes every server's downstream dropFactor times slower.
func slowDownstream(ctx context.Context, _ scenarioEnv, bases []string) (func() (time.Duration, error), error) {
	set := func(f float64) error {
		for _, b := range bases {
			req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, b+"/admin/downstream?slowdown="+strconv.FormatFloat(f, 'g', -1, 64), nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("slowing the downstream of %s: %w", b, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				return fmt.Errorf("slowing the downstream of %s: %s", b, resp.Status)
			}
		}
		return nil
	}
	if err := set(dropFactor); err != nil {
		return nil, err
	}
	return func() (time.Duration, error) { return 0, set(1) }, nil
}

// neighbourEnv, set in a child's environment, makes this binary a CPU
// burner: the noisy neighbour.
const neighbourEnv = "LOADSHED_OVERLOAD_NEIGHBOUR"

// burnIfNeighbour spins until killed when this process is a neighbour
// started by startNeighbour.
func burnIfNeighbour() {
	if os.Getenv(neighbourEnv) != "1" {
		return
	}
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			os.Exit(1) // never: keeps the loop from being removed
		}
	}
}

// startNeighbour starts a process that burns CPU on the server's CPU, as
// another service on the same machine would: the kernel then shares that
// CPU between it and the server.
func startNeighbour(_ context.Context, env scenarioEnv, _ []string) (func() (time.Duration, error), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run it as the neighbour: %w", err)
	}
	var cmd *exec.Cmd
	if env.pin.taskset != "" {
		cmd = exec.Command(env.pin.taskset, "-c", strconv.Itoa(env.pin.serverCPU), self)
	} else {
		cmd = exec.Command(self)
	}
	cmd.Env = append(os.Environ(), neighbourEnv+"=1", "GOMAXPROCS=1")
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the neighbour: %w", err)
	}
	var once sync.Once
	var used time.Duration
	stop := func() (time.Duration, error) {
		once.Do(func() {
			used, _ = procstat.CPU(cmd.Process.Pid)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return used, nil
	}
	return stop, nil
}
