package ratelimit

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// TestQuotaResetIsTheNextUnit: a lease's Quota.Reset, the RateLimit
// field's t, is how long until more units come back (draft-10), not until
// the limit is whole again.
func TestQuotaResetIsTheNextUnit(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 9, 0, time.UTC) // 9 s into a minute
	for _, tc := range []struct {
		alg   Algorithm
		taken int
		want  time.Duration
	}{
		{TokenBucket, 1, 20 * time.Second},   // 3/min: one unit per 20 s
		{TokenBucket, 2, 20 * time.Second},   // not 40: the next unit, not the whole bucket
		{LeakyBucket, 2, 20 * time.Second},   // GCRA decides as the token bucket
		{FixedWindow, 2, 51 * time.Second},   // all back at the window's end
		{SlidingLog, 3, 60 * time.Second},    // the oldest entry expires a Period on
		{SlidingWindow, 3, 71 * time.Second}, // window ends in 51 s, then a third of it: not 111
	} {
		clk := shedtest.NewClock(start)
		m, err := NewMemory(tc.alg, PerMinute(3), MemoryConfig{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{{Name: "q", Descriptors: []Descriptor{ByClient}, Store: m}}})
		var q shed.Quota
		for i := 0; i < tc.taken; i++ {
			lease, err := l.Acquire(bg, shed.Request{Key: "k"})
			if err != nil {
				t.Fatalf("%v: request %d: %v", tc.alg, i, err)
			}
			q = lease.Quota
		}
		if q.Reset != tc.want || q.Reset > time.Minute+20*time.Second {
			t.Errorf("%v, %d taken of 3/min: Reset (t) %v, want %v", tc.alg, tc.taken, q.Reset, tc.want)
		}
		m.Close()
	}
}
