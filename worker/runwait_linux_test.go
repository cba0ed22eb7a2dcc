package worker

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// More threads burning than the process has CPUs wait in the kernel's run
// queue for one another: at least (threads - CPUs) × the span in all,
// whatever else the machine runs. The reader and the CPU signal's cpu_wait
// part must see it.
func TestRunWaitSeesContention(t *testing.T) {
	r := newRunWaitReader()
	if _, ok := r.read(); !ok {
		t.Skip("this kernel does not report run-queue wait (/proc/self/task/*/schedstat)")
	}
	s, err := newCPUSignal(float64(runtime.NumCPU()), 1)
	if err != nil {
		t.Fatal(err)
	}
	threads := runtime.NumCPU() + 2
	// As many Ps as threads: with fewer, Go's scheduler, not the kernel's,
	// would make them take turns.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads))
	const span = 400 * time.Millisecond
	s.Read()
	r.read()
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A thread of its own each, whatever GOMAXPROCS is: the
			// kernel, not Go's scheduler, shares the CPUs between them.
			runtime.LockOSThread()
			burn(stop)
		}()
	}
	time.Sleep(span)
	// Read while they burn: a locked thread exits with its goroutine, and
	// takes its counts with it.
	waited, _ := r.read()
	s.Read()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	least := time.Duration(float64(threads-runtime.NumCPU()) * float64(elapsed) / 2)
	t.Logf("%d threads on %d CPUs for %v: waited %v in all (at least %v expected); cpu signal %.2f used, %.2f waited",
		threads, runtime.NumCPU(), elapsed, waited, least, s.used, s.waited)
	if waited < least {
		t.Fatalf("run-queue wait %v, want at least %v", waited, least)
	}
	if s.waited <= 0 {
		t.Fatalf("the CPU signal's cpu_wait part is %.2f under contention", s.waited)
	}
	if s.used+s.waited < 0.9 {
		t.Fatalf("the CPU signal read %.2f used + %.2f waited with every CPU contended, want about 1 or more", s.used, s.waited)
	}
}

// A thread that exits takes its run_delay with it: the sum must not run
// backwards, nor count the threads that remain twice.
func TestRunWaitSurvivesExitedThreads(t *testing.T) {
	r := newRunWaitReader()
	if _, ok := r.read(); !ok {
		t.Skip("this kernel does not report run-queue wait")
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		close(done)
	}()
	<-done
	time.Sleep(10 * time.Millisecond)
	if w, ok := r.read(); !ok || w < 0 || w > time.Second {
		t.Fatalf("read after a thread exited: %v, %v", w, ok)
	}
}
