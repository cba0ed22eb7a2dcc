// Package cacheline holds counters padded to a cache line of their own, so
// that a counter every request writes does not share its line with the
// fields read beside it, which would bounce between cores. The layers that
// keep such counters (concurrency, worker) share it.
package cacheline

import "sync/atomic"

// Int64 is an atomic.Int64 alone on its cache line (64 bytes on either
// side, for CPUs that fetch lines in pairs).
type Int64 struct {
	_ [64]byte
	atomic.Int64
	_ [56]byte
}
