package worker

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"golang.org/x/sys/unix"
)

// runWaitReader sums the time this process's threads spent runnable but
// not running: waiting in the kernel's run queue for a CPU it gave to
// another process (/proc/self/task/*/schedstat, the second field,
// run_delay, in nanoseconds). Go's own scheduler latency cannot see it: a
// goroutine on a thread the kernel descheduled counts as running.
//
// Threads come and go: each is remembered by its id, so a thread that
// exits takes its total away without making the sum run backwards.
//
// run_delay also counts the time a thread took to start running on a CPU
// that sat idle: on a virtual machine an idle virtual CPU must be scheduled
// again by the hypervisor before it runs anything, and a server woken by
// every packet waits that long thousands of times a second. On the
// demonstration's one-CPU server, refusing 5,000 requests a second to an
// I/O-bound service, its threads waited 0.36s a second for a CPU that was
// idle 40% of the time, which read as a saturated CPU and shrank the
// learnt limit to one in flight. Waiting for a CPU given to another is
// bounded by how long others had it: read caps the wait at the busy time
// of the CPUs the process may run on (/proc/stat, the hypervisor's steal
// included) less the CPU time the process used itself.
type runWaitReader struct {
	seen map[int]uint64 // run_delay of each thread at the last read
	buf  []byte
	// busy is the busy time of each CPU at the last read, in clock ticks
	// (/proc/stat), -1 for a CPU not seen.
	busy []int64
	// env is the context gopsutil reads /proc/stat with, and allowed gives
	// the CPUs the process may run on; tests point env at a fake /proc
	// (gopsutil's HOST_PROC) and replace allowed.
	env     context.Context
	allowed func(*unix.CPUSet) error
}

func newRunWaitReader() *runWaitReader {
	r := &runWaitReader{seen: make(map[int]uint64), buf: make([]byte, 0, 128), env: context.Background(),
		allowed: func(set *unix.CPUSet) error { return unix.SchedGetaffinity(0, set) }}
	r.read(0) // what was waited before now is not news
	return r
}

// read returns the run-queue wait of the process's threads since the last
// read, at most the time others had the CPUs the process may run on
// (their busy time less used, the CPU time the process used since the last
// read), and false where the kernel does not report the wait (no
// schedstat: a kernel without CONFIG_SCHED_INFO, a /proc that hides it).
// Where /proc/stat cannot be read the wait is not capped.
func (r *runWaitReader) read(used time.Duration) (time.Duration, bool) {
	waited, ok := r.threadsDelay()
	if others, known := r.othersBusy(used); known && others < waited {
		waited = max(0, others)
	}
	return waited, ok
}

// threadsDelay sums the run_delay of the process's threads since the last
// read.
func (r *runWaitReader) threadsDelay() (time.Duration, bool) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, false
	}
	var waited uint64
	ok := false
	live := make(map[int]uint64, len(names))
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		delay, found := r.threadDelay(name)
		if !found {
			continue // exited since the listing
		}
		ok = true
		live[tid] = delay
		if before, known := r.seen[tid]; known && delay >= before {
			waited += delay - before
		} else if !known {
			// A thread started since the last read: all its waiting is new.
			waited += delay
		}
	}
	r.seen = live
	return time.Duration(waited), ok
}

// threadDelay reads one thread's run_delay.
func (r *runWaitReader) threadDelay(tid string) (uint64, bool) {
	f, err := os.Open("/proc/self/task/" + tid + "/schedstat")
	if err != nil {
		return 0, false
	}
	n, err := f.Read(r.buf[:cap(r.buf)])
	f.Close()
	if err != nil || n == 0 {
		return 0, false
	}
	fields := bytes.Fields(r.buf[:n])
	if len(fields) < 2 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(fields[1]), 10, 64)
	return v, err == nil
}

// othersBusy returns the busy time of the CPUs this process may run on
// since the last read, less used, and whether /proc/stat and the affinity
// mask could be read. A CPU first seen now counts from the next read.
func (r *runWaitReader) othersBusy(used time.Duration) (time.Duration, bool) {
	var set unix.CPUSet
	if r.allowed(&set) != nil {
		return 0, false
	}
	times, err := cpu.NewExLinux().TimesWithContext(r.env, true)
	if err != nil {
		return 0, false
	}
	var ticks int64
	ok := false
	for _, t := range times {
		n, err := strconv.Atoi(strings.TrimPrefix(t.CPU, "cpu"))
		if err != nil || n < 0 || n >= len(set)*64 {
			continue
		}
		// All but idle and iowait are busy, the hypervisor's steal too;
		// guest time is within user.
		busy := int64(t.User + t.Nice + t.System + t.Irq + t.Softirq + t.Steal)
		for len(r.busy) <= n {
			r.busy = append(r.busy, -1)
		}
		before := r.busy[n]
		r.busy[n] = busy
		if !set.IsSet(n) {
			continue
		}
		ok = true
		if before >= 0 && busy >= before {
			ticks += busy - before
		}
	}
	return time.Duration(float64(ticks)*float64(time.Second)/cpu.ClocksPerSec) - used, ok
}
