package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/common"
	"golang.org/x/sys/unix"
)

// More threads burning than the process has CPUs wait in the kernel's run
// queue for one another: at least (threads - CPUs) × the span in all,
// whatever else the machine runs. The reader's sum must see it, and the
// CPU signal reads the CPUs saturated: through the CPU used, since the
// CPUs went to the process itself (the cpu_wait part is the time others
// had them, TestRunWaitSeesANeighbour's).
func TestRunWaitSeesContention(t *testing.T) {
	r := newRunWaitReader()
	if _, ok := r.threadsDelay(); !ok {
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
	r.threadsDelay()
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
	waited, _ := r.threadsDelay()
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
	if s.used+s.waited < 0.9 {
		t.Fatalf("the CPU signal read %.2f used + %.2f waited with every CPU contended, want about 1 or more", s.used, s.waited)
	}
}

// A thread that exits takes its run_delay with it: the sum must not run
// backwards, nor count the threads that remain twice.
func TestRunWaitSurvivesExitedThreads(t *testing.T) {
	r := newRunWaitReader()
	if _, ok := r.read(0); !ok {
		t.Skip("this kernel does not report run-queue wait")
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		close(done)
	}()
	<-done
	time.Sleep(10 * time.Millisecond)
	if w, ok := r.read(0); !ok || w < 0 || w > time.Second {
		t.Fatalf("read after a thread exited: %v, %v", w, ok)
	}
}

// The wait counted is at most the time others had the CPUs the process may
// run on: their busy time in /proc/stat (steal included; idle and iowait
// not), less the CPU the process used itself. CPUs outside the affinity
// mask do not count, nor a CPU first seen on this read.
func TestRunWaitOthersBusyReadsTheAllowedCPUs(t *testing.T) {
	dir := t.TempDir()
	stat := filepath.Join(dir, "stat")
	// user nice system idle iowait irq softirq steal guest guest_nice
	write := func(cpus ...string) {
		text := "cpu  1 2 3 4 5 6 7 8 0 0\n"
		for i, c := range cpus {
			text += fmt.Sprintf("cpu%d %s 0 0\n", i, c)
		}
		text += "intr 1 2 3\nctxt 5\n"
		if err := os.WriteFile(stat, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &runWaitReader{env: procAt(dir), allowed: func(set *unix.CPUSet) error {
		set.Zero()
		set.Set(0)
		set.Set(2)
		return nil
	}}
	write("100 0 50 1000 10 0 0 0", "100 0 50 1000 10 0 0 0")
	if _, ok := r.othersBusy(0); !ok {
		t.Fatal("othersBusy could not read the stat file")
	}
	// CPU 0: 30 ticks of user, 5 of softirq, 5 of steal, idle and iowait
	// moving too; CPU 1, not allowed, busy throughout; CPU 2 new.
	write("130 0 50 1060 20 0 5 5", "200 0 50 1000 10 0 0 0", "500 0 0 0 0 0 0 0")
	got, ok := r.othersBusy(100 * time.Millisecond)
	if want := 400*time.Millisecond - 100*time.Millisecond; !ok || got != want {
		t.Fatalf("othersBusy = %v, %v; want %v (40 ticks busy on CPU 0, less 100ms used)", got, ok, want)
	}
	// CPU 2 counts from its second reading.
	write("130 0 50 1085 20 0 5 5", "200 0 50 1000 10 0 0 0", "510 0 0 0 0 0 0 0")
	if got, _ := r.othersBusy(0); got != 100*time.Millisecond {
		t.Fatalf("othersBusy = %v, want 100ms (10 ticks on CPU 2)", got)
	}
	r.env = procAt(filepath.Join(dir, "missing"))
	if _, ok := r.othersBusy(0); ok {
		t.Fatal("othersBusy read a missing file")
	}
}

// procAt is a context in which gopsutil reads /proc at dir.
func procAt(dir string) context.Context {
	return context.WithValue(context.Background(), common.EnvKey, common.EnvMap{common.HostProcEnvKey: dir})
}

// A neighbour process burning the CPU a thread of this process is pinned
// to takes it half the time: the wait counted is about that, not capped
// away, and the CPU signal reads it in its cpu_wait part.
func TestRunWaitSeesANeighbour(t *testing.T) {
	if os.Getenv("LOADSHED_TEST_BURN") == "1" {
		// The neighbour: killed by its parent, and gone by itself if the
		// parent dies first.
		stop := make(chan struct{})
		time.AfterFunc(10*time.Second, func() { close(stop) })
		burn(stop)
		return
	}
	r := newRunWaitReader()
	if _, ok := r.threadsDelay(); !ok {
		t.Skip("this kernel does not report run-queue wait (/proc/self/task/*/schedstat)")
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skip(err)
	}
	cpu := -1
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpu = i
			break
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunWaitSeesANeighbour$")
	cmd.Env = append(os.Environ(), "LOADSHED_TEST_BURN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &one); err != nil {
		t.Skip(err)
	}
	s, err := newCPUSignal(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	pinned := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			pinned <- err
			return
		}
		pinned <- nil
		burn(stop)
	}()
	if err := <-pinned; err != nil {
		t.Skip(err)
	}
	time.Sleep(100 * time.Millisecond) // both burning
	s.Read()
	time.Sleep(500 * time.Millisecond)
	s.Read()
	close(stop)
	t.Logf("a thread pinned to CPU %d with a neighbour burning it: cpu signal %.2f used, %.2f waited", cpu, s.used, s.waited)
	if s.waited < 0.25 {
		t.Fatalf("the CPU signal's cpu_wait part is %.2f with a neighbour taking half the CPU, want about 0.5", s.waited)
	}
}
