package worker

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCgroupQuota(t *testing.T) {
	cases := []struct {
		dir   string
		quota float64
		ok    bool
		err   string
	}{
		{"v2-nested", 2, true, ""},   // the parent's 2 CPUs, tighter than the grandparent's 4
		{"v2-half", 0.5, true, ""},   // half a CPU at the root
		{"v2-noquota", 0, false, ""}, // "max"
		{"v1", 0, false, ""},         // cgroup v1 only: not read
		{"absent", 0, false, ""},     // no /proc/self/cgroup at all
		{"malformed", 0, false, "bad quota"},
		{"bad-period", 0, false, "bad period"},
		{"garbled", 0, false, "want \"quota period\""},
	}
	for _, c := range cases {
		q, ok, err := cgroupQuota(filepath.Join("testdata", "cgroup", c.dir))
		if q != c.quota || ok != c.ok || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: quota %v ok %v err %v, want %v %v %q", c.dir, q, ok, err, c.quota, c.ok, c.err)
		}
	}
}

func TestDetectBudget(t *testing.T) {
	procs := float64(runtime.GOMAXPROCS(0))
	if n := float64(runtime.NumCPU()); n < procs {
		procs = n
	}
	b := detectBudget(filepath.Join("testdata", "cgroup", "v2-half"))
	if b.CPUs != 0.5 || b.Source != "cgroup v2 cpu.max" || b.Err != nil {
		t.Fatalf("half a CPU of quota: %+v", b)
	}
	for _, dir := range []string{"v2-noquota", "v1", "absent"} {
		b := detectBudget(filepath.Join("testdata", "cgroup", dir))
		if b.CPUs > procs || b.Source != "GOMAXPROCS" || b.Err != nil {
			t.Fatalf("%s: %+v, want GOMAXPROCS (%v at most) without error", dir, b, procs)
		}
	}
	b = detectBudget(filepath.Join("testdata", "cgroup", "malformed"))
	if b.CPUs > procs || b.CPUs <= 0 || b.Source != "GOMAXPROCS" || b.Err == nil {
		t.Fatalf("malformed cpu.max: %+v, want the GOMAXPROCS fallback with the error recorded", b)
	}
	// A layer records the fallback once, at New, and keeps deciding.
	if real := DetectBudget(); real.CPUs <= 0 || real.CPUs > procs {
		t.Fatalf("this machine: %+v", real)
	}
}
