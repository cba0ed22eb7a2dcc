package procstat

import (
	"os"
	"testing"
	"time"
)

func TestCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	before, ok := CPU(os.Getpid())
	if !ok {
		t.Fatal("this process's CPU time: not read")
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if after, ok := CPU(os.Getpid()); !ok || after <= before {
		t.Errorf("after 50ms of work: %s, %v; before %s", after, ok, before)
	}
	if _, ok := CPU(-1); ok {
		t.Error("a process that does not exist: ok")
	}
}
