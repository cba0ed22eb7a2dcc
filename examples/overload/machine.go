package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/internal/procstat"
)

// The demonstration's figures mean something only if the server had its CPU
// and the load generator kept its pace. A machine shared with other work
// (builds, test suites, a hypervisor's other guests) takes CPU away from
// both, and a target then fails for reasons that are not the defence's. So
// each step reads, before and after, what Linux says of the machine, and
// the report calls a step's figures untrustworthy, rather than failed, when:
//
//   - other processes ran on the server's CPU (its busy time, less the
//     server's own CPU time and the noisy neighbour the scenario starts,
//     above maxForeign of the step);
//   - the hypervisor stole CPU time (steal, above maxSteal of all CPUs'
//     time);
//   - the load generator sent more than maxLate of its requests more than
//     lateBy after their planned arrival;
//   - more than maxStalled of the load generator's goroutines waited over
//     stalledBy to run: it sent on time but read the answers late
//     (stalledBy says when that happens);
//   - the server's CPU ran the requests' work more than maxSpeedChange
//     slower or faster than when the capacity was measured, where the
//     capacity is the CPU's (cpuspeed.go);
//   - a refusal's cost, measured just before or just after the step's
//     load (one round of refusal.go's measurement each), was more than
//     maxRefusalDrift away from the cost the step's goodput bound prices,
//     either way: the machine changed under the step in a way the work's
//     speed need not show. The work is a loop of arithmetic; reading
//     requests and answering them is system calls and memory, and a
//     neighbour that slows those (a busy sibling hyperthread, a host's
//     other guests) can leave the loop's speed alone. Back-to-back rounds
//     on a quiet machine read within 8% of their mean (31.8-37.1µs); on
//     a shared virtual machine the cost read 28.0µs before one scenario
//     and 59.9µs before the next, minutes apart, while the work's speed
//     stayed within 5% of its calibration's;
//   - while the capacity of a CPU-bound server was measured, the server
//     used less than minCalibrationCPU of its CPU: the closed loop did not
//     keep it busy, and the capacity every step is judged against reads
//     low. Calibrations on a quiet machine keep it 99.9% busy. (In one
//     run noisy's calibration read 433/s against 481-496/s for the same
//     service in every other calibration of the hour, and nothing flagged
//     it; the server's CPU was not recorded then, so whether this check
//     would have is not known.)
const (
	maxForeign        = 0.10
	maxSteal          = 0.05
	maxLate           = 0.01
	maxStalled        = 0.001
	maxRefusalDrift   = 0.25
	minCalibrationCPU = 0.95
)

// cpuTimes is one reading of /proc: the busy and steal time of the
// server's CPU and of all, and the CPU time of the processes watched.
type cpuTimes struct {
	at        time.Time
	cpuBusy   time.Duration // user+nice+system on the server's CPU
	allTotal  time.Duration // every CPU, every state
	allSteal  time.Duration
	processes time.Duration // utime+stime of the watched processes
	// overflows is the machine's count of connections its listen queues
	// had no room for (-1: unknown).
	overflows int64
	ok        bool
}

// readCPUTimes reads /proc/stat for cpu (-1: none) and /proc/PID/stat for
// each pid; ok is false when any of it is unreadable (not Linux).
func readCPUTimes(cpu int, pids ...int) cpuTimes {
	t := cpuTimes{at: time.Now(), overflows: listenOverflows()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]time.Duration
		for i := range v {
			n, _ := strconv.ParseInt(f[i+1], 10, 64)
			v[i] = time.Duration(n) * procstat.ClockTick
		}
		switch f[0] {
		case "cpu":
			for _, x := range v {
				t.allTotal += x
			}
			t.allSteal = v[7]
		case "cpu" + strconv.Itoa(cpu):
			t.cpuBusy = v[0] + v[1] + v[2]
		}
	}
	for _, pid := range pids {
		d, ok := procstat.CPU(pid)
		if !ok {
			return t
		}
		t.processes += d
	}
	t.ok = true
	return t
}

// listenOverflows is TcpExt's ListenOverflows from /proc/net/netstat:
// connections refused for want of room in a listen queue, since boot, on
// every socket of the machine; -1 when unreadable.
func listenOverflows() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return -1
	}
	// Each group is two lines: "TcpExt: name...", then "TcpExt: value...".
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) || values[0] != "TcpExt:" {
			continue
		}
		for j, n := range names {
			if n == "ListenOverflows" {
				v, err := strconv.ParseInt(values[j], 10, 64)
				if err != nil {
					return -1
				}
				return v
			}
		}
	}
	return -1
}

// quiet is how undisturbed one step ran.
type quiet struct {
	known   bool    // false: /proc could not be read
	foreign float64 // share of the step other processes ran on the server's CPU
	steal   float64 // share of all CPU time stolen by the hypervisor
	late    float64 // share of requests sent more than lateBy late
	lateP99 time.Duration
	// stalled and stalledP999 are the generator's waits to run (flood).
	stalled     float64
	stalledP999 time.Duration
	// overflows is how many connections the machine's listen queues had
	// no room for during the step (ListenOverflows in /proc/net/netstat).
	// It is reported, not judged as the machine's noise: a server whose
	// clients time out makes them reconnect, and its accept queue then
	// overflows (the unprotected set-ups' at 5x and 10x, every run), so
	// it is the server's outcome. The demo opens its connections before
	// each step (loadClient.openConns), so a server that keeps up has
	// none.
	overflows int64
	// serverCPU is the server's own CPU time over the step, as a share of
	// the step (1: all of one CPU).
	serverCPU float64
	// saturating: the step is a CPU-bound server's calibration, which
	// must keep the server's CPU busy (minCalibrationCPU).
	saturating bool
	// speed is how much faster the server's CPU ran the requests' work
	// than in the calibration (speedChange; 0: unknown, or the capacity
	// not the CPU's).
	speed float64
	// refusalCost is the cost of a refusal the goodput bound prices, and
	// refusalAround the same measured just before and just after the
	// step's load (0: not measured).
	refusalCost   time.Duration
	refusalAround [2]time.Duration
}

// refusalDrift is how far, as a share, a refusal's cost measured around
// the step strayed from the one its bound prices, either way (0: unknown).
func (q quiet) refusalDrift() float64 {
	var d float64
	if q.refusalCost <= 0 {
		return 0
	}
	for _, c := range q.refusalAround {
		if c > 0 {
			d = max(d, math.Abs(float64(c)/float64(q.refusalCost)-1))
		}
	}
	return d
}

// quietBetween compares two readings; extra is CPU time the scenario's
// own neighbour used on the server's CPU (not foreign: it is the
// scenario), server the servers' own.
// Without pinning there is no server CPU to look at: only steal and the
// generator's lateness are judged.
func quietBetween(a, b cpuTimes, pinned bool, server, extra time.Duration, f flood) quiet {
	q := quiet{late: f.late, lateP99: f.lateP99, stalled: f.stalled, stalledP999: f.stalledP999}
	if a.overflows >= 0 && b.overflows >= 0 {
		q.overflows = b.overflows - a.overflows
	}
	if !a.ok || !b.ok {
		return q
	}
	wall := b.at.Sub(a.at)
	if wall <= 0 {
		return q
	}
	q.known = true
	if pinned {
		foreign := (b.cpuBusy - a.cpuBusy) - server - extra
		q.foreign = max(0, float64(foreign)/float64(wall))
	}
	if tot := b.allTotal - a.allTotal; tot > 0 {
		q.steal = float64(b.allSteal-a.allSteal) / float64(tot)
	}
	q.serverCPU = float64(server) / float64(wall)
	return q
}

// trusted is whether the step's figures may decide a target, and if not,
// why.
func (q quiet) trusted() (bool, string) {
	var why []string
	if q.known && q.foreign > maxForeign {
		why = append(why, fmt.Sprintf("other processes took %.1f%% of the server's CPU", 100*q.foreign))
	}
	if q.known && q.steal > maxSteal {
		why = append(why, fmt.Sprintf("the hypervisor stole %.1f%% of the CPU time", 100*q.steal))
	}
	if q.known && q.saturating && q.serverCPU < minCalibrationCPU {
		why = append(why, fmt.Sprintf("the server used %.1f%% of its CPU while its capacity was measured, under %.0f%%: the capacity reads low", 100*q.serverCPU, 100*minCalibrationCPU))
	}
	if q.speed < -maxSpeedChange || q.speed > maxSpeedChange {
		how := "slower"
		if q.speed > 0 {
			how = "faster"
		}
		why = append(why, fmt.Sprintf("the server's CPU ran the requests' work %.1f%% %s than when the capacity was measured", 100*math.Abs(q.speed), how))
	}
	if d := q.refusalDrift(); d > maxRefusalDrift {
		why = append(why, fmt.Sprintf("a refusal cost the server %s before this load and %s after it, against the %s its bound prices", us(q.refusalAround[0]), us(q.refusalAround[1]), us(q.refusalCost)))
	}
	if q.late > maxLate {
		why = append(why, fmt.Sprintf("the load generator sent %.1f%% of its requests over %s late (p99 %s)", 100*q.late, lateBy, ms(q.lateP99)))
	}
	if q.stalled > maxStalled {
		why = append(why, fmt.Sprintf("the load generator fell behind reading the answers: %.2f%% of its goroutines waited over %s to run (p99.9 %s)", 100*q.stalled, ms(stalledBy), ms(q.stalledP999)))
	}
	return len(why) == 0, strings.Join(why, "; ")
}
