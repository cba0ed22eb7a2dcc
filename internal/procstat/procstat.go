// Package procstat reads a process's CPU time from Linux's /proc, for the
// overload demonstration and the benchmarks that judge a server by the CPU
// it used.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// of note).
const ClockTick = 10 * time.Millisecond

// CPU is process pid's user and system CPU time (utime+stime of
// /proc/PID/stat), in ClockTicks; ok is false when it cannot be read (the
// process is gone, or this is not Linux).
func CPU(pid int) (d time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (state is field 3; utime 14, stime 15).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * ClockTick, true
}
