//go:build unix

package worker

import (
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
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
// less than a CPU: the test checks the signal against the process's own
// rusage over the same span, and that it rose.
func TestCPUSignalSeesABurn(t *testing.T) {
	s, err := newCPUSignal(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	idle := s.Read()
	stop := make(chan struct{})
	go burn(stop)
	defer close(stop)
	r0, w0 := rusageCPU(t), time.Now()
	s.Read()
	time.Sleep(500 * time.Millisecond)
	busy := s.Read()
	want := (rusageCPU(t) - r0).Seconds() / time.Since(w0).Seconds()
	t.Logf("CPU signal: %.2f idle, %.2f burning (rusage says %.2f)", idle, busy, want)
	if busy <= idle+0.1 || busy < want-0.15 || busy > want+0.15 {
		t.Fatalf("CPU signal %.2f while burning (idle %.2f), rusage says %.2f", busy, idle, want)
	}
}

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Skip("no getrusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A goroutine storm on one P moves the scheduler latency signal: fifty
// goroutines that never block wait for one another's time slices (10ms).
func TestSchedSignalSeesAGoroutineStorm(t *testing.T) {
	s := newSchedSignal(10 * time.Millisecond)
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
	if p := s.Read(); p < 2 {
		t.Fatalf("scheduler latency signal %.2f after a storm of 50 busy goroutines on one P, want above 2 (p99 over 20ms)", p)
	} else {
		t.Logf("scheduler latency signal %.1f (p99 %.0fms)", p, p*10)
	}
}
