package api

import "golang.org/x/sys/unix"

// threadCPU returns the calling thread's CPU time, in ns.
func threadCPU() (int64, bool) {
	var t unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t) != nil {
		return 0, false
	}
	return t.Nano(), true
}
