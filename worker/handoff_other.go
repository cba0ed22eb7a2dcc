//go:build !unix

package worker

// handoffPipe: outside Unix a pipe is not watched by the network poller
// (reading one blocks a thread), so releases grant at once.
func handoffPipe() (wait, wake func() error, release func()) { return nil, nil, nil }
