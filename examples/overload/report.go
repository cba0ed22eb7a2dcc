package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// The targets loadshed's default set-up must meet in every scenario, at
// targetSteps × capacity (tenantSteps in the tenant scenarios), judged
// against the floor on the same arrivals; goodput against the bound the
// step's refusals leave (goodputBound).
const (
	targetCriticalSuccess = 0.999 // critical success, at least, where critical demand alone fits
	targetGoodput         = 0.95  // goodput, at least this share of the bound the refusals leave
	targetCriticalP99     = 1.5   // critical p99, at most this many times the floor's
	targetAllP99          = 2     // p99 of all admitted, at most this many times the floor's
	targetHalfLoadRefused = 0.001 // at half load, at most this share not served
	// The tenant scenarios': the light clients' (each below its fair
	// share) served and p99 against the floor's.
	targetLightSuccess = 0.999
	targetLightP99     = 1.5
)

// targetSteps are the offered loads at which the overload targets apply.
var targetSteps = []float64{2, 5, 10}

// targetStep is the load TestQuickRun compares the set-ups at.
const targetStep = 5

// step is one offered load against one set-up.
type step struct {
	setup   api.Protection
	mult    float64 // offered load, as a multiple of capacity
	offered float64 // requests per second
	// stats by priority index; [shed.NumPriorities] is every priority.
	stats [shed.NumPriorities + 1]stepStats
	// steady is stats without the seconds after a capacity change (the
	// recovery targets judge those); stats itself without a change.
	steady [shed.NumPriorities + 1]stepStats
	// unchanged is stats without the change and the seconds after it
	// (stats itself without a change).
	unchanged [shed.NumPriorities + 1]stepStats
	// capacity is what the service could answer, per second, on average
	// over the step (less than the run's with a capacity change).
	capacity float64
	// floor is the perfect scheduler's figures on the same arrivals.
	floor floorFigures
	// recoveries follow each capacity change, in order.
	recoveries []recovery
	quiet      quiet
	// fleetUsage is the fleet layer's mean usage by priority index during
	// the step, when the servers report it.
	fleetUsage []float64
	// refusals is the step's 429s and 503s per second; bound the most it
	// could answer once they are paid for (goodputBound).
	refusals, bound float64
	// tenant is the figures by client, in the tenant scenarios.
	tenant *tenantStats
}

// report is a whole run of one scenario.
type report struct {
	opts     options
	pin      pinning
	sc       scenario
	measure  time.Duration // of each step
	capacity float64
	// capacityChanged is the capacity during a capacity change (capacity
	// without one).
	capacityChanged          float64
	unloadedP50, unloadedP99 time.Duration
	// loopPoints are the closed loops that find how many requests a
	// service that needs both a pool and the CPU must have in flight to
	// serve its capacity (fewestServing); none for the others.
	loopPoints []loopPoint
	// floorServers is how many servers the floor has (scenario.floorServers).
	floorServers int
	// calibration is how quiet the machine was while the capacity was
	// measured.
	calibration quiet
	// workCPU is the mean CPU time of a request's work in the
	// calibration, in seconds, where the capacity is the CPU's (0:
	// unknown): the CPU's speed then (cpuspeed.go).
	workCPU               float64
	steps                 []step
	started               time.Time
	loadBefore, loadAfter string
	// refusalCost is the server's CPU per refusal, measured in the run
	// (refusal.go).
	refusalCost time.Duration
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// pct shows a share with the digits a threshold needs, rounded down, so
// that a figure just under a target never reads as meeting it (99.89% is
// not shown as 99.9%, nor 94.96% as 95.0%).
func pct(f float64) string {
	switch {
	case f >= 1:
		return "100%"
	case f >= 0.99:
		return fmt.Sprintf("%.2f%%", math.Floor(10000*f)/100)
	}
	return fmt.Sprintf("%.1f%%", math.Floor(1000*f)/10)
}

// ratio shows a multiple of the floor, rounded up, for the same reason.
func ratio(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", math.Ceil(100*float64(a)/float64(b))/100)
}

// progressLine is the line printed as each step ends.
func (s step) progressLine() string {
	all, crit := s.stats[shed.NumPriorities], s.stats[shed.Critical.Index()]
	line := fmt.Sprintf("%-11s %4.1f× %5.0f/s: ok %-6s critical ok %-6s shed %5d  timeouts %5d  p99 %-8s goodput %4.0f/s (%s of capacity, %s of the bound %.0f/s)  critical p99 %s of the floor's, all %s",
		s.setup, s.mult, s.offered, pct(all.successRate()), pct(crit.successRate()),
		all.counts[resThrottle]+all.counts[resShed], all.counts[resTimeout]+all.counts[resError], ms(all.p99), all.goodput,
		pct(all.goodput/s.capacity), pct(all.goodput/s.bound), s.bound, ratio(crit.p99, s.floor.criticalP99), ratio(all.p99, s.floor.allP99))
	if t := s.tenant; t != nil {
		l, fl := t.light[shed.NumPriorities], s.floor.light[shed.NumPriorities]
		line += fmt.Sprintf("; light clients served %s (the floor %s), p99 %s of the floor's; heavy share %s",
			pct(l.successRate()), pct(fl.success), ratio(l.p99, fl.p99), pct(t.heavyShare))
	}
	for _, r := range s.recoveries {
		line += fmt.Sprintf("; back %s after the change at %.2fs", backString(r.back), r.at.Seconds())
	}
	if s.quiet.overflows > 0 {
		line += fmt.Sprintf("; the listen queue overflowed %d times", s.quiet.overflows)
	}
	if ok, why := s.quiet.trusted(); !ok {
		line += " [busy machine: " + why + "]"
	}
	return line
}

// printTables writes one table per set-up: a row per step and priority.
func (r *report) printTables(w io.Writer) {
	fleet := false
	for _, s := range r.steps {
		if s.fleetUsage != nil {
			fleet = true
		}
	}
	for _, setup := range r.opts.setups {
		fmt.Fprintf(w, "\n%s\n", r.setupTitle(setup))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "load\toffered/s\tpriority\tsent\tsuccess\t429\t503\ttimeout\terror\tp50\tp99\tgoodput/s\tbound/s\t"
		if fleet {
			head += "fleet in flight\t"
		}
		fmt.Fprintln(tw, head)
		for _, s := range r.steps {
			if s.setup != setup {
				continue
			}
			for i := shed.NumPriorities; i >= 0; i-- {
				name := "all"
				if i < shed.NumPriorities {
					name = shed.Priorities()[i].String()
				}
				st := s.stats[i]
				load, offered := "", ""
				if i == shed.NumPriorities {
					load, offered = fmt.Sprintf("%.1f×", s.mult), fmt.Sprintf("%.0f", s.offered)
				}
				bound := ""
				if i == shed.NumPriorities {
					bound = fmt.Sprintf("%.0f", s.bound)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f\t%s\t",
					load, offered, name, st.sent, pct(st.successRate()), st.counts[resThrottle], st.counts[resShed],
					st.counts[resTimeout], st.counts[resError], ms(st.p50), ms(st.p99), st.goodput, bound)
				if fleet {
					if s.fleetUsage != nil && i < shed.NumPriorities {
						fmt.Fprintf(tw, "%.1f\t", s.fleetUsage[i])
					} else {
						fmt.Fprint(tw, "\t")
					}
				}
				fmt.Fprintln(tw)
			}
		}
		tw.Flush()
	}
}

func (r *report) setupTitle(p api.Protection) string {
	switch p {
	case api.Unprotected:
		return "no protection"
	case api.BlindLimit:
		return fmt.Sprintf("priority-blind global rate limit at %.0f%% of capacity", 100*r.opts.headroom)
	case api.Loadshed:
		return "loadshed's default set-up"
	case api.LoadshedCPUBound:
		return "loadshed tuned for one CPU (worker.CPUBound, budgets, in-flight cap)"
	case api.LoadshedFIFO:
		return "loadshed's default set-up with fair share off (arrival order within a priority)"
	}
	return string(p)
}

// trusted is whether a step's figures may decide a target: the machine
// was quiet during the step and while the capacity was measured.
func (r *report) trusted(s step) (bool, string) {
	ok, why := s.quiet.trusted()
	if calOK, calWhy := r.calibration.trusted(); !calOK {
		if why != "" {
			why += "; "
		}
		return false, why + "while the capacity was measured, " + calWhy
	}
	return ok, why
}

// verdict is one target's outcome at one step.
type verdict struct {
	mult float64
	name string
	ok   bool
	// unsure: the target failed on a step whose machine was too busy for
	// its figures to be trusted.
	unsure bool
	got    string
}

func (v verdict) word() string {
	switch {
	case v.ok:
		return "PASS"
	case v.unsure:
		return "UNSURE"
	}
	return "FAIL"
}

// targets checks loadshed's targets at every step that has some; nil
// without loadshed in the run.
func (r *report) targets() []verdict {
	// The default set-up when the run has it, else the tuned one.
	var setup api.Protection
	for _, p := range r.opts.setups {
		if p == api.Loadshed || (setup == "" && isLoadshed(p)) {
			setup = p
		}
	}
	var out []verdict
	for _, s := range r.steps {
		if s.setup != setup || setup == "" {
			continue
		}
		trusted, _ := r.trusted(s)
		add := func(name string, ok bool, got string) {
			out = append(out, verdict{mult: s.mult, name: name, ok: ok, unsure: !ok && !trusted, got: got})
		}
		crit, all := s.steady[shed.Critical.Index()], s.stats[shed.NumPriorities]
		if s.mult <= 0.5 {
			half := s.unchanged[shed.NumPriorities]
			notServed := half.sent - half.counts[resOK]
			share := 0.0
			if half.sent > 0 {
				share = float64(notServed) / float64(half.sent)
			}
			add(fmt.Sprintf("not served ≤ %.1f%%", 100*targetHalfLoadRefused), share <= targetHalfLoadRefused,
				fmt.Sprintf("%d of %d (%.2f%%)", notServed, half.sent, 100*share))
		}
		if r.sc.tenant != nil {
			if slices.Contains(tenantSteps, s.mult) {
				r.tenantTargets(s, add)
			}
		} else if slices.Contains(targetSteps, s.mult) {
			if s.mult*mix[shed.Critical] < 1 {
				add(fmt.Sprintf("critical success ≥ %.1f%%", 100*targetCriticalSuccess), crit.sent > 0 && crit.successRate() >= targetCriticalSuccess,
					fmt.Sprintf("%s (%d of %d)", pct(crit.successRate()), crit.counts[resOK], crit.sent))
			}
			r.goodputTarget(s, add)
			critAll := s.stats[shed.Critical.Index()]
			add(fmt.Sprintf("critical p99 ≤ %.1f× the floor's (%s)", targetCriticalP99, ms(s.floor.criticalP99)),
				critAll.counts[resOK] > 0 && float64(critAll.p99) <= targetCriticalP99*float64(s.floor.criticalP99),
				fmt.Sprintf("%s (%s)", ms(critAll.p99), ratio(critAll.p99, s.floor.criticalP99)))
			add(fmt.Sprintf("p99 of all admitted ≤ %d× the floor's (%s)", targetAllP99, ms(s.floor.allP99)),
				all.counts[resOK] > 0 && float64(all.p99) <= targetAllP99*float64(s.floor.allP99),
				fmt.Sprintf("%s (%s)", ms(all.p99), ratio(all.p99, s.floor.allP99)))
		}
		for _, rc := range s.recoveries {
			add(fmt.Sprintf("back within %s of the change at %.2fs", recoverWithin, rc.at.Seconds()),
				rc.back >= 0 && rc.back <= recoverWithin, backString(rc.back))
		}
	}
	return out
}

// goodputTarget judges a step's goodput against the bound its refusals
// leave (goodputBound; boundWithChange with a capacity change).
func (r *report) goodputTarget(s step, add func(string, bool, string)) {
	all := s.stats[shed.NumPriorities]
	// One decimal: 126.6/s against a target of 126.7/s must not read as
	// 127/s against 127/s.
	how := fmt.Sprintf("%.0f/s × (1 − %.0f refusals/s × %s)", s.capacity, s.refusals, us(r.refusalCost))
	if len(s.recoveries) > 0 {
		// boundWithChange: by phase, not one product.
		how = fmt.Sprintf("each phase's capacity × (1 − its refusals/s × %s ÷ the part of the CPU left to the server), averaged; %.0f refusals/s in all", us(r.refusalCost), s.refusals)
	}
	add(fmt.Sprintf("goodput ≥ %.0f%% of the bound (%.1f/s)", 100*targetGoodput, targetGoodput*s.bound), all.goodput >= targetGoodput*s.bound,
		fmt.Sprintf("%.1f/s (%s of the bound %.1f/s: %s)", all.goodput, pct(all.goodput/s.bound), s.bound, how))
}

// tenantTargets judges a tenant step: the light clients served and their
// p99 against the floor's, at each priority they sent whose requests the
// floor serves all of (each light client below its fair share there; in
// tenant-critical from 10× on the heavy client's critical requests leave
// default ones nothing, in the floor too), and goodput.
func (r *report) tenantTargets(s step, add func(string, bool, string)) {
	t := s.tenant
	for _, i := range lightPriorities(*t) {
		if i == shed.NumPriorities {
			continue // judged by priority
		}
		got, fl := t.light[i], s.floor.light[i]
		name := "light clients"
		if len(lightPriorities(*t)) > 1 {
			name += " (" + priorityName(i) + ")"
		}
		if fl.success < targetLightSuccess {
			continue // the tenant table shows it
		}
		add(fmt.Sprintf("%s served ≥ %.1f%%", name, 100*targetLightSuccess), got.sent > 0 && got.successRate() >= targetLightSuccess,
			fmt.Sprintf("%s (%d of %d)", pct(got.successRate()), got.counts[resOK], got.sent))
		add(fmt.Sprintf("%s p99 ≤ %.1f× the floor's (%s)", name, targetLightP99, ms(fl.p99)),
			got.counts[resOK] > 0 && float64(got.p99) <= targetLightP99*float64(fl.p99),
			fmt.Sprintf("%s (%s)", ms(got.p99), ratio(got.p99, fl.p99)))
	}
	r.goodputTarget(s, add)
}

func backString(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func (r *report) printTargets(w io.Writer) {
	vs := r.targets()
	if vs == nil {
		return
	}
	fmt.Fprintf(w, "\nloadshed's targets, scenario %s:\n", r.sc.name)
	last := -1.0
	for _, v := range vs {
		load := ""
		if v.mult != last {
			load, last = fmt.Sprintf("%.1f×", v.mult), v.mult
		}
		fmt.Fprintf(w, "  %5s  %-6s  %-52s %s\n", load, v.word(), v.name, v.got)
	}
	for _, s := range r.steps {
		if ok, why := r.trusted(s); !ok && isLoadshed(s.setup) {
			fmt.Fprintf(w, "  not to be trusted: %s at %.1f×: %s\n", s.setup, s.mult, why)
		}
	}
}

// printFloorTable writes every step's figures against the floor's, and
// the windows around each capacity change of loadshed's steps.
func (r *report) printFloorTable(w io.Writer) {
	fmt.Fprintf(w, "\nagainst the floor (a perfect strict-priority scheduler with no overhead, on the same arrivals), scenario %s\n", r.sc.name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "set-up\tload\tcritical ok\tgoodput (of capacity)\trefusals/s\tbound/s\tof the bound\tcritical p99\t× floor\tall p99\t× floor\tnot served\tback after changes\tserver CPU\tother on its CPU\tlate sends\t")
	for _, s := range r.steps {
		crit, all := s.stats[shed.Critical.Index()], s.stats[shed.NumPriorities]
		var back []string
		for _, rc := range s.recoveries {
			back = append(back, backString(rc.back))
		}
		cpu, other := "?", "?"
		if s.quiet.known {
			cpu, other = fmt.Sprintf("%.0f%%", 100*s.quiet.serverCPU), fmt.Sprintf("%.1f%%", 100*s.quiet.foreign)
		}
		fmt.Fprintf(tw, "%s\t%.1f×\t%s\t%.0f/s (%s)\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.1f%%\t\n",
			s.setup, s.mult, pct(crit.successRate()), all.goodput, pct(all.goodput/s.capacity), s.refusals, s.bound, pct(all.goodput/s.bound),
			ms(crit.p99), ratio(crit.p99, s.floor.criticalP99), ms(all.p99), ratio(all.p99, s.floor.allP99),
			all.sent-all.counts[resOK], strings.Join(back, " "), cpu, other, 100*s.quiet.late)
		if s.setup == r.opts.setups[len(r.opts.setups)-1] {
			f := s.floor
			fmt.Fprintf(tw, "floor\t%.1f×\t%s\t%.0f/s (%s)\t\t\t\t%s\t\t%s\t\t%d\t\t\t\t\t\n",
				s.mult, pct(f.criticalSuccess), f.goodput, pct(f.goodput/s.capacity), ms(f.criticalP99), ms(f.allP99), f.sent-f.served)
		}
	}
	tw.Flush()
	for _, s := range r.steps {
		if !isLoadshed(s.setup) {
			continue
		}
		for _, rc := range s.recoveries {
			fmt.Fprintf(w, "%s %.1f×, change at %.2fs (capacity now %.0f/s), from %.2fs by %s: goodput/s", s.setup, s.mult, rc.at.Seconds(), rc.capacity, rc.from.Seconds(), window)
			for _, g := range rc.goodput {
				fmt.Fprintf(w, " %.0f", g)
			}
			fmt.Fprint(w, " | floor's")
			for _, g := range rc.floor {
				fmt.Fprintf(w, " %.0f", g)
			}
			fmt.Fprint(w, " | less refusals")
			for _, g := range rc.bound {
				fmt.Fprintf(w, " %.0f", g)
			}
			fmt.Fprint(w, " | critical ok")
			for _, c := range rc.critical {
				if c < 0 {
					fmt.Fprint(w, " -")
				} else {
					fmt.Fprintf(w, " %s", pct(c))
				}
			}
			fmt.Fprintf(w, " | back %s\n", backString(rc.back))
		}
	}
}

// machine describes where the run happened, for the saved table.
func (r *report) machine() string {
	host, _ := os.Hostname()
	pin := fmt.Sprintf("server on CPU %d, load on CPU %d", r.pin.serverCPU, r.pin.loadCPU)
	if r.pin.note != "" {
		pin = r.pin.note
	}
	return fmt.Sprintf("%s, %s/%s, %d CPUs, %s; %s; %d instance(s)", host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), pin, r.opts.instances)
}

// jsonReport is overload.json: the run's figures, for programs (the test
// reads it).
type jsonReport struct {
	Machine  string `json:"machine"`
	Scenario string `json:"scenario"`
	// LoadAverage is /proc/loadavg's three figures before and after.
	LoadAverage     [2]string `json:"load_average"`
	Capacity        float64   `json:"capacity_per_second"`
	CapacityChanged float64   `json:"capacity_changed_per_second,omitempty"`
	UnloadedP50     float64   `json:"unloaded_p50_ms"`
	UnloadedP99     float64   `json:"unloaded_p99_ms"`
	// RefusalCost is the server's CPU per refusal, measured in the run:
	// the goodput bound's.
	RefusalCost float64    `json:"refusal_cost_us"`
	Steps       []jsonStep `json:"steps"`
	// TargetsMet: every target passed; TargetsUnsure: some failed, on
	// steps whose machine was too busy to trust.
	TargetsMet     *bool    `json:"targets_met,omitempty"`
	TargetsUnsure  bool     `json:"targets_unsure,omitempty"`
	TargetVerdicts []string `json:"target_verdicts,omitempty"`
}

type jsonStep struct {
	Setup   string  `json:"setup"`
	Load    float64 `json:"load"` // × capacity
	Offered float64 `json:"offered_per_second"`
	// ByPriority has the four priorities' words and "all".
	ByPriority map[string]jsonStats `json:"by_priority"`
	Capacity   float64              `json:"capacity_per_second"`
	Floor      jsonFloor            `json:"floor"`
	// CriticalP99Ratio and AllP99Ratio are the step's p99s over the floor's.
	CriticalP99Ratio float64 `json:"critical_p99_over_floor"`
	AllP99Ratio      float64 `json:"all_p99_over_floor"`
	// RecoverySeconds is how long after each capacity change the step was
	// back on target (-1: never).
	RecoverySeconds []float64 `json:"recovery_seconds,omitempty"`
	// ListenOverflows is how many connections the machine's listen queues
	// had no room for during the step.
	ListenOverflows int64 `json:"listen_overflows,omitempty"`
	// CPUSpeedChange is how much faster the server's CPU ran the
	// requests' work than in the calibration, as a share (negative:
	// slower), where the capacity is the CPU's (cpuspeed.go).
	CPUSpeedChange float64 `json:"cpu_speed_change,omitempty"`
	// RefusalCostAround is a refusal's cost, in µs, measured just before
	// and just after the step's load (the report's RefusalCost is the one
	// its bound prices).
	RefusalCostAround []float64 `json:"refusal_cost_around_us,omitempty"`
	Trusted           bool      `json:"trusted"`
	Untrusted         string    `json:"untrusted_because,omitempty"`
	// Refusals is the step's 429s and 503s per second; GoodputBound the
	// capacity they leave, capacity × (1 − refusals × the refusal cost).
	Refusals     float64 `json:"refusals_per_second"`
	GoodputBound float64 `json:"goodput_bound_per_second"`
	// Tenant has the tenant scenarios' figures by client.
	Tenant *jsonTenant `json:"tenant,omitempty"`
}

// jsonTenant is a tenant step's figures by client: the light clients'
// (by priority's word and "all") and the heavy one's, and the floor's for
// the light ones.
type jsonTenant struct {
	Light      map[string]jsonStats `json:"light"`
	Heavy      jsonStats            `json:"heavy"`
	HeavyShare float64              `json:"heavy_share_of_goodput"`
	FloorLight map[string]jsonClass `json:"floor_light"`
}

type jsonClass struct {
	Sent    int     `json:"sent"`
	Success float64 `json:"success_rate"`
	P99     float64 `json:"p99_ms"`
}

type jsonFloor struct {
	CriticalSuccess float64 `json:"critical_success_rate"`
	Goodput         float64 `json:"goodput_per_second"`
	CriticalP99     float64 `json:"critical_p99_ms"`
	AllP99          float64 `json:"all_p99_ms"`
}

type jsonStats struct {
	Sent     int     `json:"sent"`
	Success  float64 `json:"success_rate"`
	Throttle int     `json:"status_429"`
	Shed     int     `json:"status_503"`
	Timeout  int     `json:"timeouts"`
	Errors   int     `json:"errors"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	// OutsideP99 is the p99 of the time the requests served spent outside
	// the server's handler chain (before any middleware ran, or after the
	// answer was written), from what the server said of the time inside.
	OutsideP99 float64 `json:"outside_p99_ms,omitempty"`
	Goodput    float64 `json:"goodput_per_second"`
	// FleetInFlight is the fleet layer's mean usage, with -instances.
	FleetInFlight *float64 `json:"fleet_in_flight,omitempty"`
}

func statsJSON(st stepStats) jsonStats {
	return jsonStats{Sent: st.sent, Success: st.successRate(), Throttle: st.counts[resThrottle], Shed: st.counts[resShed],
		Timeout: st.counts[resTimeout], Errors: st.counts[resError], P50: msFloat(st.p50), P99: msFloat(st.p99), OutsideP99: msFloat(st.outsideP99), Goodput: st.goodput}
}

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *report) json() jsonReport {
	out := jsonReport{Machine: r.machine(), Scenario: r.sc.name, LoadAverage: [2]string{r.loadBefore, r.loadAfter},
		Capacity: r.capacity, UnloadedP50: msFloat(r.unloadedP50), UnloadedP99: msFloat(r.unloadedP99),
		RefusalCost: float64(r.refusalCost) / float64(time.Microsecond)}
	if r.sc.change != nil {
		out.CapacityChanged = r.capacityChanged
	}
	ratioOf := func(a, b time.Duration) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	for _, s := range r.steps {
		js := jsonStep{Setup: string(s.setup), Load: s.mult, Offered: s.offered, ByPriority: map[string]jsonStats{}, Capacity: s.capacity,
			Floor:            jsonFloor{CriticalSuccess: s.floor.criticalSuccess, Goodput: s.floor.goodput, CriticalP99: msFloat(s.floor.criticalP99), AllP99: msFloat(s.floor.allP99)},
			CriticalP99Ratio: ratioOf(s.stats[shed.Critical.Index()].p99, s.floor.criticalP99),
			AllP99Ratio:      ratioOf(s.stats[shed.NumPriorities].p99, s.floor.allP99)}
		js.Trusted, js.Untrusted = r.trusted(s)
		js.Refusals, js.GoodputBound = s.refusals, s.bound
		if t := s.tenant; t != nil {
			jt := &jsonTenant{Light: map[string]jsonStats{}, FloorLight: map[string]jsonClass{}, HeavyShare: t.heavyShare,
				Heavy: statsJSON(t.heavy[shed.NumPriorities])}
			for _, i := range append(lightPriorities(*t), shed.NumPriorities) {
				jt.Light[priorityName(i)] = statsJSON(t.light[i])
				f := s.floor.light[i]
				jt.FloorLight[priorityName(i)] = jsonClass{Sent: f.sent, Success: f.success, P99: msFloat(f.p99)}
			}
			js.Tenant = jt
		}
		js.ListenOverflows = s.quiet.overflows
		js.CPUSpeedChange = s.quiet.speed
		if a := s.quiet.refusalAround; a[0] > 0 && a[1] > 0 {
			js.RefusalCostAround = []float64{float64(a[0]) / float64(time.Microsecond), float64(a[1]) / float64(time.Microsecond)}
		}
		for _, rc := range s.recoveries {
			js.RecoverySeconds = append(js.RecoverySeconds, rc.back.Seconds())
		}
		for i, st := range s.stats {
			name := "all"
			if i < shed.NumPriorities {
				name = shed.Priorities()[i].String()
			}
			x := statsJSON(st)
			if s.fleetUsage != nil && i < shed.NumPriorities {
				x.FleetInFlight = &s.fleetUsage[i]
			}
			js.ByPriority[name] = x
		}
		out.Steps = append(out.Steps, js)
	}
	if vs := r.targets(); vs != nil {
		met := true
		for _, v := range vs {
			met = met && v.ok
			out.TargetsUnsure = out.TargetsUnsure || v.unsure
			out.TargetVerdicts = append(out.TargetVerdicts, fmt.Sprintf("%.1f× %s %s: %s", v.mult, v.word(), v.name, v.got))
		}
		out.TargetsMet = &met
	}
	return out
}

// save writes the table, the figures and the chart into dir.
func (r *report) save(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "overload.txt"), r.text(), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r.json(), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "overload.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return r.chart(dir, "scenario "+r.sc.name+"; "+strings.TrimSpace(r.machine()))
}

// text is the run's full table, as overload.txt has it.
func (r *report) text() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%s\n", time.Now().UTC().Format(time.RFC3339), r.machine())
	fmt.Fprintf(&b, "scenario %s: %s\nload average %s before, %s after\n", r.sc.name, r.sc.about, r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "capacity %.0f requests/s; unloaded latency p50 %s, p99 %s; timeout %s; steps %s warm-up + %s measured\n",
		r.capacity, ms(r.unloadedP50), ms(r.unloadedP99), r.opts.timeout, r.opts.warmup, r.measure)
	fmt.Fprintf(&b, "a refusal costs the server %s of CPU (measured in the run): each goodput is judged against capacity × (1 − refusals/s × that)\n", us(r.refusalCost))
	if r.sc.change != nil {
		fmt.Fprintf(&b, "with %s: capacity %.0f requests/s, from %s to %s of each step's measured time\n",
			r.sc.change.about, r.capacityChanged, r.opts.before, r.opts.before+r.opts.during)
	}
	r.printTables(&b)
	r.printFloorTable(&b)
	r.printTenantTable(&b)
	r.printTargets(&b)
	return b.Bytes()
}
