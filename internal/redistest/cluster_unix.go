//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// lockFile holds f's advisory lock, so that the test binaries of several
// packages, run at once by go test, take turns with the one cluster.
func lockFile(f *os.File) error   { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// killProcess kills a node the way a crashed host goes: at once, nothing
// flushed.
func killProcess(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }
