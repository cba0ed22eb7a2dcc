package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// The targets loadshed must meet at targetStep × capacity.
const (
	targetStep            = 5
	targetCriticalSuccess = 0.999 // critical success rate, at least
	targetP99Factor       = 2     // admitted p99 at most this many times the unloaded p99
	targetGoodput         = 0.90  // goodput, at least this share of capacity
)

// step is one offered load against one set-up.
type step struct {
	setup   api.Protection
	mult    float64 // offered load, as a multiple of capacity
	offered float64 // requests per second
	// stats by priority index; [shed.NumPriorities] is every priority.
	stats [shed.NumPriorities + 1]stepStats
	// fleetUsage is the fleet layer's mean usage by priority index during
	// the step, when the servers report it.
	fleetUsage []float64
}

// report is a whole run.
type report struct {
	opts                     options
	pin                      pinning
	capacity                 float64
	unloadedP50, unloadedP99 time.Duration
	steps                    []step
	started                  time.Time
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func pct(f float64) string {
	switch {
	case f >= 1:
		return "100%"
	case f >= 0.999:
		return fmt.Sprintf("%.2f%%", 100*f)
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// progressLine is the line printed as each step ends.
func (s step) progressLine() string {
	all, crit := s.stats[shed.NumPriorities], s.stats[shed.Critical.Index()]
	return fmt.Sprintf("%-11s %4.1f× %5.0f/s: ok %-6s critical ok %-6s shed %5d  timeouts %5d  p99 %-8s goodput %4.0f/s",
		s.setup, s.mult, s.offered, pct(all.successRate()), pct(crit.successRate()),
		all.counts[resThrottle]+all.counts[resShed], all.counts[resTimeout]+all.counts[resError], ms(all.p99), all.goodput)
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
		fmt.Fprintf(w, "\n%s\n", setupTitle(setup))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "load\toffered/s\tpriority\tsent\tsuccess\t429\t503\ttimeout\terror\tp50\tp99\tgoodput/s\t"
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f\t",
					load, offered, name, st.sent, pct(st.successRate()), st.counts[resThrottle], st.counts[resShed],
					st.counts[resTimeout], st.counts[resError], ms(st.p50), ms(st.p99), st.goodput)
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

func setupTitle(p api.Protection) string {
	switch p {
	case api.Unprotected:
		return "no protection"
	case api.BlindLimit:
		return "priority-blind global rate limit at capacity"
	case api.Loadshed:
		return "loadshed's layers"
	}
	return string(p)
}

// verdict is one target's outcome.
type verdict struct {
	name string
	ok   bool
	got  string
}

// targets checks loadshed's targets at targetStep × capacity; nil when the
// run had no such step.
func (r *report) targets() []verdict {
	for _, s := range r.steps {
		if s.setup != api.Loadshed || s.mult != targetStep {
			continue
		}
		crit, all := s.stats[shed.Critical.Index()], s.stats[shed.NumPriorities]
		limit := time.Duration(targetP99Factor * float64(r.unloadedP99))
		return []verdict{
			{fmt.Sprintf("critical success ≥ %.1f%%", 100*targetCriticalSuccess), crit.sent > 0 && crit.successRate() >= targetCriticalSuccess,
				fmt.Sprintf("%s of %d", pct(crit.successRate()), crit.sent)},
			{fmt.Sprintf("admitted p99 ≤ %d× unloaded p99 (%s)", targetP99Factor, ms(limit)), all.counts[resOK] > 0 && all.p99 <= limit,
				fmt.Sprintf("%s (%.1f×)", ms(all.p99), float64(all.p99)/float64(r.unloadedP99))},
			{fmt.Sprintf("goodput ≥ %.0f%% of capacity (%.0f/s)", 100*targetGoodput, targetGoodput*r.capacity), all.goodput >= targetGoodput*r.capacity,
				fmt.Sprintf("%.0f/s (%.0f%%)", all.goodput, 100*all.goodput/r.capacity)},
		}
	}
	return nil
}

func (r *report) printTargets(w io.Writer) {
	vs := r.targets()
	if vs == nil {
		return
	}
	fmt.Fprintf(w, "\nloadshed at %d× capacity:\n", targetStep)
	for _, v := range vs {
		word := "PASS"
		if !v.ok {
			word = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %-48s %s\n", word, v.name, v.got)
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
	Machine        string     `json:"machine"`
	Capacity       float64    `json:"capacity_per_second"`
	UnloadedP50    float64    `json:"unloaded_p50_ms"`
	UnloadedP99    float64    `json:"unloaded_p99_ms"`
	Steps          []jsonStep `json:"steps"`
	TargetsMet     *bool      `json:"targets_met,omitempty"`
	TargetVerdicts []string   `json:"target_verdicts,omitempty"`
}

type jsonStep struct {
	Setup   string  `json:"setup"`
	Load    float64 `json:"load"` // × capacity
	Offered float64 `json:"offered_per_second"`
	// ByPriority has the four priorities' words and "all".
	ByPriority map[string]jsonStats `json:"by_priority"`
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
	Goodput  float64 `json:"goodput_per_second"`
	// FleetInFlight is the fleet layer's mean usage, with -instances.
	FleetInFlight *float64 `json:"fleet_in_flight,omitempty"`
}

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *report) json() jsonReport {
	out := jsonReport{Machine: r.machine(), Capacity: r.capacity, UnloadedP50: msFloat(r.unloadedP50), UnloadedP99: msFloat(r.unloadedP99)}
	for _, s := range r.steps {
		js := jsonStep{Setup: string(s.setup), Load: s.mult, Offered: s.offered, ByPriority: map[string]jsonStats{}}
		for i, st := range s.stats {
			name := "all"
			if i < shed.NumPriorities {
				name = shed.Priorities()[i].String()
			}
			x := jsonStats{Sent: st.sent, Success: st.successRate(), Throttle: st.counts[resThrottle], Shed: st.counts[resShed],
				Timeout: st.counts[resTimeout], Errors: st.counts[resError], P50: msFloat(st.p50), P99: msFloat(st.p99), Goodput: st.goodput}
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
			out.TargetVerdicts = append(out.TargetVerdicts, fmt.Sprintf("%v %s: %s", map[bool]string{true: "PASS", false: "FAIL"}[v.ok], v.name, v.got))
		}
		out.TargetsMet = &met
	}
	return out
}

// save writes the table, the figures and the chart into dir.
func (r *report) save(dir string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%s\n", time.Now().UTC().Format(time.RFC3339), r.machine())
	fmt.Fprintf(&b, "capacity %.0f requests/s (%s of CPU each); unloaded latency p50 %s, p99 %s; timeout %s; steps %s warm-up + %s measured\n",
		r.capacity, r.opts.work, ms(r.unloadedP50), ms(r.unloadedP99), r.opts.timeout, r.opts.warmup, r.opts.measure)
	r.printTables(&b)
	r.printTargets(&b)
	if err := os.WriteFile(filepath.Join(dir, "overload.txt"), b.Bytes(), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r.json(), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "overload.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return r.chart(dir, strings.TrimSpace(r.machine()))
}
