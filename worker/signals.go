package worker

import (
	"math"
	"os"
	"runtime/metrics"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// Names of the built-in signals, as their utilization gauges are labelled.
const (
	SignalCPU = "cpu"
	// SignalCPUWait is the part of the cpu signal that is CPU the process
	// waited for and did not get (Linux only), reported on its own.
	SignalCPUWait      = "cpu_wait"
	SignalSchedLatency = "sched_latency"
	SignalQueueDelay   = "queue_delay"
	SignalInFlight     = "in_flight"
)

// cpuSignal reads the CPU this process wants as a share of the budget:
// the CPU time it used (gopsutil: user + system) and, on Linux, the time
// its threads waited in the kernel's run queue for a CPU given to another
// process (runWaitReader, which caps it at the time others had the CPUs).
// With a neighbour taking half of a one-CPU budget, a CPU-bound server uses
// half a CPU and waits for the other half: it is as saturated as alone on
// the CPU, and its CPU time alone reads it half idle.
type cpuSignal struct {
	proc     *process.Process
	capacity float64 // budget × Full, in CPUs
	lastCPU  float64 // seconds
	lastWall time.Time
	now      func() time.Time
	wait     *runWaitReader
	// used and waited are the last Read's parts, as shares of capacity.
	used, waited float64
}

func newCPUSignal(budget, full float64) (*cpuSignal, error) {
	p, err := process.NewProcess(int32(os.Getpid()))
	if err != nil {
		return nil, err
	}
	s := &cpuSignal{proc: p, capacity: budget * full, now: time.Now, wait: newRunWaitReader()}
	s.lastCPU, _ = s.cpuSeconds()
	s.lastWall = s.now()
	return s, nil
}

func (s *cpuSignal) cpuSeconds() (float64, error) {
	t, err := s.proc.Times()
	if err != nil {
		return 0, err
	}
	return t.User + t.System, nil
}

// Read returns the CPU used and waited for since the last Read as a share
// of the capacity. A failed read counts as no pressure: shedding on a
// broken gauge would take the service down for no reason.
func (s *cpuSignal) Read() float64 {
	c, err := s.cpuSeconds()
	dc := c - s.lastCPU
	waited, _ := s.wait.read(time.Duration(max(0, dc) * float64(time.Second)))
	w := s.now()
	s.used, s.waited = 0, 0
	if err != nil {
		return 0
	}
	dt := w.Sub(s.lastWall).Seconds()
	s.lastCPU, s.lastWall = c, w
	if dt <= 0 || dc < 0 || s.capacity <= 0 {
		return 0
	}
	s.used, s.waited = dc/dt/s.capacity, waited.Seconds()/dt/s.capacity
	return s.used + s.waited
}

// Waited returns the last Read's CPU waited for, as a share of the
// capacity: the cpu_wait gauge.
func (s *cpuSignal) Waited() float64 { return s.waited }

// schedSignal reads the Go scheduler's latency histogram and returns the
// p99 of the latencies recorded over the last schedWindow reads, against a
// target. A window of several intervals holds more samples than one, so a
// single stall (the OS taking the CPU away for a few milliseconds) moves
// the p99 less, while sustained queueing still moves it within a read.
type schedSignal struct {
	sample []metrics.Sample
	prev   []uint64
	deltas [schedWindow][]uint64 // ring of per-read deltas
	next   int
	sum    []uint64
	target float64 // seconds
}

const (
	schedLatencies = "/sched/latencies:seconds"
	schedWindow    = 4
)

func newSchedSignal(target time.Duration) *schedSignal {
	s := &schedSignal{sample: []metrics.Sample{{Name: schedLatencies}}, target: target.Seconds()}
	s.Read() // the first delta starts now
	return s
}

func (s *schedSignal) Read() float64 {
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := s.sample[0].Value.Float64Histogram()
	if len(s.prev) != len(h.Counts) {
		s.prev = append([]uint64(nil), h.Counts...)
		s.sum = make([]uint64, len(h.Counts))
		for i := range s.deltas {
			s.deltas[i] = make([]uint64, len(h.Counts))
		}
		return 0
	}
	// Replace the oldest delta in the window with this read's.
	d := s.deltas[s.next]
	s.next = (s.next + 1) % schedWindow
	var total uint64
	for i, c := range h.Counts {
		s.sum[i] -= d[i]
		d[i] = c - s.prev[i]
		s.sum[i] += d[i]
		s.prev[i] = c
		total += s.sum[i]
	}
	if total == 0 || s.target <= 0 {
		return 0
	}
	rank := total - total/100 // the smallest count covering 99%
	var seen uint64
	for i, c := range s.sum {
		seen += c
		if seen >= rank {
			// The bucket's upper bound: the p99 is at most this.
			p99 := h.Buckets[i+1]
			if math.IsInf(p99, 1) {
				p99 = h.Buckets[i]
			}
			return p99 / s.target
		}
	}
	return 0
}
