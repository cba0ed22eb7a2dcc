package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/shirou/gopsutil/v4/cpu"
)

// Budget is how many CPUs this process may use, and where that figure came
// from.
type Budget struct {
	// CPUs is the budget, in CPUs (1.5 means one and a half), at least a
	// thousandth.
	CPUs float64
	// Source says where the figure came from: "cgroup v2 cpu.max",
	// "GOMAXPROCS" (no cgroup quota, or one above GOMAXPROCS), or "config".
	Source string
	// Err is set when the cgroup files were there but unreadable or
	// malformed; the budget then fell back to GOMAXPROCS. It is recorded
	// once, when the budget is detected, never on the request path.
	Err error
}

// DetectBudget reads this process's CPU budget: the cgroup v2 CPU quota
// (cpu.max of its cgroup and every parent, the tightest) where there is one,
// else GOMAXPROCS, never more than the CPUs the host has (gopsutil) and the
// process may run on (its affinity mask). A process with 2 CPUs of quota on
// a 64-core host reads 2.
//
// A process under cgroup v1, or under no cgroup, falls back to GOMAXPROCS
// without an error: v1's quota is not read. Unreadable or malformed cgroup v2
// files also fall back to GOMAXPROCS, with Budget.Err saying why.
func DetectBudget() Budget { return detectBudget("/") }

func detectBudget(root string) Budget {
	cpus := float64(runtime.GOMAXPROCS(0))
	if n := runtime.NumCPU(); n > 0 && float64(n) < cpus {
		cpus = float64(n)
	}
	if n, err := cpu.Counts(true); err == nil && n > 0 && float64(n) < cpus {
		cpus = float64(n)
	}
	b := Budget{CPUs: cpus, Source: "GOMAXPROCS"}
	quota, ok, err := cgroupQuota(root)
	switch {
	case err != nil:
		b.Err = err
	case ok && quota < cpus:
		b.CPUs, b.Source = quota, "cgroup v2 cpu.max"
	}
	b.CPUs = math.Max(b.CPUs, 0.001)
	return b
}

// cgroupQuota returns the tightest cgroup v2 CPU quota of this process, in
// CPUs, reading /proc/self/cgroup and cpu.max files under root (a directory
// standing for "/", so that tests can point it at fixtures). ok is false,
// with no error, when there is no cgroup v2 or no quota ("max").
func cgroupQuota(root string) (quota float64, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("worker: reading /proc/self/cgroup: %w", err)
	}
	group, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// cgroup v2's single hierarchy is the line "0::/path".
		if p, cut := strings.CutPrefix(sc.Text(), "0::"); cut {
			group, found = p, true
			break
		}
	}
	if !found {
		return 0, false, nil // cgroup v1 only, or none
	}
	if !strings.HasPrefix(group, "/") {
		return 0, false, fmt.Errorf("worker: /proc/self/cgroup: malformed cgroup v2 path %q", group)
	}
	base := filepath.Join(root, "sys", "fs", "cgroup")
	// The quota in force is the tightest of the group and its parents.
	for g := path.Clean(group); ; g = path.Dir(g) {
		q, has, err := readCPUMax(filepath.Join(base, filepath.FromSlash(g), "cpu.max"))
		if err != nil {
			return 0, false, err
		}
		if has && (!ok || q < quota) {
			quota, ok = q, true
		}
		if g == "/" {
			return quota, ok, nil
		}
	}
}

// readCPUMax parses one cpu.max file: "max 100000" (no quota) or
// "200000 100000" (quota and period, in microseconds). A missing file is no
// quota: the cpu controller is not enabled at that level.
func readCPUMax(name string) (cpus float64, ok bool, err error) {
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("worker: reading cgroup cpu.max: %w", err)
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, false, fmt.Errorf("worker: cgroup cpu.max %q: want \"quota period\"", strings.TrimSpace(string(data)))
	}
	period, err := strconv.ParseUint(f[1], 10, 63)
	if err != nil || period == 0 {
		return 0, false, fmt.Errorf("worker: cgroup cpu.max %q: bad period", strings.TrimSpace(string(data)))
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	q, err := strconv.ParseUint(f[0], 10, 63)
	if err != nil || q == 0 {
		return 0, false, fmt.Errorf("worker: cgroup cpu.max %q: bad quota", strings.TrimSpace(string(data)))
	}
	return float64(q) / float64(period), true, nil
}
