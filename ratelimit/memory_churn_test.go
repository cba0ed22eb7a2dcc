package ratelimit

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// TestMemoryChurnAtCap offers four times MaxKeys distinct keys to every
// store, so that each new key evicts one, and compares the heap with that
// of a store holding as many live keys that never evicted. At the cap the
// store must stay within 1.25× (a bug once: tombstones doubled every
// full shard's table, 1.98×), and the bytes per key doc.go gives are the
// figures measured here at the cap.
func TestMemoryChurnAtCap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million keys")
	}
	n, offered := 100_000, 400_000
	if raceEnabled {
		// The race detector pads every object: the ratio still holds,
		// the figures do not, and the run is ten times slower.
		n, offered = 5_000, 20_000
	}
	bounds := map[Algorithm]float64{TokenBucket: 70, LeakyBucket: 70, FixedWindow: 135, SlidingWindow: 170, SlidingLog: 360}
	for _, alg := range allAlgs {
		atCap, live := churnBytesPerKey(t, alg, n, offered)
		for try := 0; atCap <= 0 && try < 3; try++ {
			// Another test's garbage was freed meanwhile (a Redis client
			// closed by a cluster test, whose go-redis slot-map reload
			// goroutine held it a moment longer): measure again.
			atCap, live = churnBytesPerKey(t, alg, n, offered)
		}
		if atCap <= 0 {
			t.Fatalf("%v: the heap shrank while the store filled, three times: other tests' garbage keeps being freed", alg)
		}
		// Garbage another test frees while a store fills only lowers
		// what the store seems to take: the larger of two measurements
		// is the one to compare (one under the race detector read 6
		// B/key for a leaky bucket's 50, and failed the ratio).
		plain := max(bytesPerKey(t, alg, live), bytesPerKey(t, alg, live))
		t.Logf("%v: at the cap %.0f B/key (%d live keys), without churn %.0f B/key: %.2f×", alg, atCap, live, plain, atCap/plain)
		if atCap > 1.25*plain {
			t.Errorf("%v: %.0f B/key at the cap after churn, %.2f× the %.0f B/key of as many keys without churn; want ≤ 1.25×",
				alg, atCap, atCap/plain, plain)
		}
		if atCap > bounds[alg] && !raceEnabled {
			t.Errorf("%v: %.0f B/key at the cap, documented bound %v", alg, atCap, bounds[alg])
		}
	}
}

// churnBytesPerKey returns the heap per live key of a store with MaxKeys n
// after offered distinct keys, and how many keys it holds; 0 per key when
// the heap shrank meanwhile (another test's garbage freed).
func churnBytesPerKey(t testing.TB, alg Algorithm, n, offered int) (float64, int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // what earlier tests left, finalizers included
	runtime.ReadMemStats(&before)
	m, err := NewMemory(alg, PerMinute(100), MemoryConfig{MaxKeys: n, Clock: shedtest.NewClock(contractStart)})
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for i := 0; i < offered; i++ {
		buf = fmt.Appendf(buf[:0], "client-%09d", i)
		m.Allow(context.Background(), string(buf), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := m.Len()
	if live > n || live < n*9/10 {
		t.Fatalf("%v: %d keys held at a cap of %d", alg, live, n)
	}
	runtime.KeepAlive(m)
	m.Close()
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grown <= 0 {
		t.Logf("%v: the heap shrank by %d bytes while the store filled: another test's garbage was freed", alg, -grown)
		return 0, live
	}
	return float64(grown) / float64(live), live
}
