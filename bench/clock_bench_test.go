package bench

import (
	"testing"
	"time"
)

var clockSink time.Duration

// BenchmarkClock is the floor under every rate-limit row: each limiter
// reads the clock at least once per decision (loadshed through
// time.Since of a monotonic base, the peers through time.Now), and on a
// virtual machine that read is a large part of a decision.
func BenchmarkClock(b *testing.B) {
	base := time.Now()
	b.Run("peer=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			clockSink += time.Duration(time.Now().UnixNano())
		}
	})
	b.Run("peer=time.Since", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			clockSink += time.Since(base)
		}
	})
}
