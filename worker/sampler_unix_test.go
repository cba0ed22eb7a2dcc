//go:build unix

package worker

import (
	"math"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// burn keeps one goroutine busy until stop closes.
func burn(stop <-chan struct{}) {
	x := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		for i := 0; i < 10000; i++ {
			x += i * i
		}
		_ = x
	}
}

// A bounded CPU burn moves the CPU signal: one busy goroutine is up to a
// whole CPU of a one-CPU budget. The machine is shared, so the burn may get
// much less than a CPU: the test checks the signal against the process's
// own rusage over the same spans, idle and burning, and that it rose by
// what rusage says it rose.
func TestCPUSignalSeesABurn(t *testing.T) {
	s, err := newCPUSignal(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The signal's part that is CPU used; what the threads waited for a
	// CPU (on a shared machine, some) is TestRunWaitSeesContention's.
	measure := func(span time.Duration) (signal, want float64) {
		s.Read()
		r0, w0 := rusageCPU(t), time.Now()
		time.Sleep(span)
		if r := s.Read(); r < s.used {
			t.Fatalf("CPU signal %.2f below the CPU it used, %.2f", r, s.used)
		}
		return s.used, (rusageCPU(t) - r0).Seconds() / time.Since(w0).Seconds()
	}
	idle, idleWant := measure(300 * time.Millisecond)
	stop := make(chan struct{})
	go burn(stop)
	busy, busyWant := measure(500 * time.Millisecond)
	close(stop)
	t.Logf("CPU signal: %.2f idle (rusage %.2f), %.2f burning (rusage %.2f)", idle, idleWant, busy, busyWant)
	// /proc counts CPU time in 10ms ticks: allow a few over the span.
	for _, c := range [][2]float64{{idle, idleWant}, {busy, busyWant}} {
		if math.Abs(c[0]-c[1]) > 0.1 {
			t.Fatalf("CPU signal %.2f, rusage says %.2f", c[0], c[1])
		}
	}
	if busyWant-idleWant > 0.2 && busy-idle < (busyWant-idleWant)/2 {
		t.Fatalf("the burn raised rusage's reading by %.2f but the signal only by %.2f", busyWant-idleWant, busy-idle)
	}
	if busy <= 0 {
		t.Fatal("CPU signal 0 while burning")
	}
}

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Skip("no getrusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storm runs fifty goroutines that never block on one P for 300ms: they
// wait for one another's time slices (10ms).
func storm() {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); burn(stop) }()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
}

// A goroutine storm on one P moves the scheduler latency signal: fifty
// goroutines that never block wait for one another's time slices (10ms).
func TestSchedSignalSeesAGoroutineStorm(t *testing.T) {
	s := newSchedSignal(10 * time.Millisecond)
	storm()
	if p := s.Read(); p < 2 {
		t.Fatalf("scheduler latency signal %.2f after a storm of 50 busy goroutines on one P, want above 2 (p99 over 20ms)", p)
	} else {
		t.Logf("scheduler latency signal %.1f (p99 %.0fms)", p, p*10)
	}
}

// With the learnt limit a backlogged scheduler shrinks the limit and does
// not move the shed level: its latency counts the admitted requests that
// yield (and wait in the run queue by design), so a level driven by it was
// fed by its own shedding, and after a flood's first moments held at 3,
// shedding all but critical traffic while the CPU sat half idle (the
// demonstration's cpu scenario at 5x: 48% of capacity served).
func TestLearntLimitSchedLatencyCapsTheLimitNotTheLevel(t *testing.T) {
	clock := shedtest.NewClock(t0)
	l, err := New(Config{Interval: DefaultInterval, Clock: clock, CPU: CPUConfig{Disable: true}, SchedLatencyTarget: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	storm()
	for i := 0; i < 4; i++ {
		clock.Advance(DefaultInterval)
	}
	var sched float64
	l.ReportGauges(func(g layerkit.Gauge) {
		if g.Name == layerkit.GaugeUtilization && g.Signal == SignalSchedLatency {
			sched = g.Value
		}
	})
	if sched < 1 {
		t.Skipf("scheduler latency signal %.2f after the storm: not saturated, nothing to check", sched)
	}
	if lv := l.Level(); lv != 0 {
		t.Fatalf("shed level %.2f with the scheduler latency signal at %.2f, want 0: with the learnt limit it caps the limit", lv, sched)
	}
	if !l.lim.capped.Load() {
		t.Fatalf("scheduler latency signal %.2f did not cap the learnt limit", sched)
	}
}
