//go:build !linux

package worker

import "time"

// runWaitReader reads nothing outside Linux, whose /proc alone reports how
// long a process's threads waited for a CPU.
type runWaitReader struct{}

func newRunWaitReader() *runWaitReader { return &runWaitReader{} }

func (r *runWaitReader) read(time.Duration) (time.Duration, bool) { return 0, false }
