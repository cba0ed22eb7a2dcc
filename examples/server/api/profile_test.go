package api

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// isProfile reports whether the file at path holds a written profile:
// pprof writes gzip-compressed protocol buffers.
func isProfile(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.HasPrefix(b, []byte{0x1f, 0x8b})
}

// startProfile starts cpuProfile, or skips the test when the test binary
// itself is being profiled (go test -cpuprofile): a process has one CPU
// profile at a time.
func startProfile(t *testing.T, path string, d time.Duration) (stop func() error) {
	t.Helper()
	stop, err := cpuProfile(path, d)
	if err != nil && strings.Contains(err.Error(), "already in use") {
		t.Skip("the test binary is being profiled:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

func TestCPUProfileIsWrittenWhenStopped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop := startProfile(t, path, 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("a second stop: %v", err)
	}
	if !isProfile(t, path) {
		t.Fatal("no profile written")
	}
}

// The overload demonstration kills its servers: a profile given a length
// must be complete without the server stopping.
func TestCPUProfileStopsByItselfAfterItsLength(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	startProfile(t, path, time.Nanosecond)
	for deadline := time.Now().Add(10 * time.Second); !isProfile(t, path); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the profile was not written within 10s of its length")
		}
	}
	// And profiling is free again.
	if err := pprof.StartCPUProfile(new(bytes.Buffer)); err != nil {
		t.Fatalf("profiling still in use: %v", err)
	}
	pprof.StopCPUProfile()
}

func TestCPUProfileBadSettings(t *testing.T) {
	dir := t.TempDir()
	if _, err := cpuProfile(filepath.Join(dir, "p"), -time.Second); err == nil || !strings.Contains(err.Error(), "-cpuprofile-for") {
		t.Errorf("a negative length: %v; want an error naming -cpuprofile-for", err)
	}
	if _, err := cpuProfile(filepath.Join(dir, "missing", "p"), 0); err == nil || !strings.Contains(err.Error(), "-cpuprofile") {
		t.Errorf("a file in a missing folder: %v; want an error naming -cpuprofile", err)
	}
}
