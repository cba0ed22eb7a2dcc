package worker

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// runWaitReader sums the time this process's threads spent runnable but
// not running: waiting in the kernel's run queue for a CPU it gave to
// another process (/proc/self/task/*/schedstat, the second field,
// run_delay, in nanoseconds). Go's own scheduler latency cannot see it: a
// goroutine on a thread the kernel descheduled counts as running.
//
// Threads come and go: each is remembered by its id, so a thread that
// exits takes its total away without making the sum run backwards.
type runWaitReader struct {
	seen map[int]uint64 // run_delay of each thread at the last read
	buf  []byte
}

func newRunWaitReader() *runWaitReader {
	r := &runWaitReader{seen: make(map[int]uint64), buf: make([]byte, 0, 128)}
	r.read() // what was waited before now is not news
	return r
}

// read returns the run-queue wait of the process's threads since the last
// read, and false where the kernel does not report it (no schedstat: a
// kernel without CONFIG_SCHED_INFO, a /proc that hides it).
func (r *runWaitReader) read() (time.Duration, bool) {
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
