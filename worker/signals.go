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
	SignalCPU          = "cpu"
	SignalSchedLatency = "sched_latency"
	SignalQueueDelay   = "queue_delay"
	SignalInFlight     = "in_flight"
)

// cpuSignal reads this process's CPU time (gopsutil: user + system) and
// turns its growth over wall time into a share of the budget.
type cpuSignal struct {
	proc     *process.Process
	capacity float64 // budget × Full, in CPUs
	lastCPU  float64 // seconds
	lastWall time.Time
	now      func() time.Time
}

func newCPUSignal(budget, full float64) (*cpuSignal, error) {
	p, err := process.NewProcess(int32(os.Getpid()))
	if err != nil {
		return nil, err
	}
	s := &cpuSignal{proc: p, capacity: budget * full, now: time.Now}
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

// Read returns the CPU used since the last Read as a share of the capacity.
// A failed read counts as no pressure: shedding on a broken gauge would take
// the service down for no reason.
func (s *cpuSignal) Read() float64 {
	c, err := s.cpuSeconds()
	w := s.now()
	if err != nil {
		return 0
	}
	dt := w.Sub(s.lastWall).Seconds()
	dc := c - s.lastCPU
	s.lastCPU, s.lastWall = c, w
	if dt <= 0 || dc < 0 || s.capacity <= 0 {
		return 0
	}
	return dc / dt / s.capacity
}

// schedSignal reads the Go scheduler's latency histogram and returns the p99
// of the latencies recorded since the last Read, against a target.
type schedSignal struct {
	sample []metrics.Sample
	prev   []uint64
	target float64 // seconds
}

const schedLatencies = "/sched/latencies:seconds"

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
		s.prev = make([]uint64, len(h.Counts))
		copy(s.prev, h.Counts)
		return 0
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - s.prev[i]
	}
	p99 := 0.0
	if total > 0 {
		rank := total - total/100 // the smallest count covering 99%
		var seen uint64
		for i, c := range h.Counts {
			seen += c - s.prev[i]
			if seen >= rank {
				// The bucket's upper bound: the p99 is at most this.
				p99 = h.Buckets[i+1]
				if math.IsInf(p99, 1) {
					p99 = h.Buckets[i]
				}
				break
			}
		}
	}
	copy(s.prev, h.Counts)
	if s.target <= 0 {
		return 0
	}
	return p99 / s.target
}
