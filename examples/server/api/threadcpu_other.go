//go:build !linux

package api

// threadCPU: no thread CPU clock is read off Linux.
func threadCPU() (int64, bool) { return 0, false }
