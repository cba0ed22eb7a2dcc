package bench

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// manyKeys is the key count of the many-key rows.
const manyKeys = 100000

// makeKeys returns n distinct keys; one key is "hot".
func makeKeys(n int) []string {
	if n == 1 {
		return []string{"hot"}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}

// rowApplies says whether peer p is measured on a row: limiters without
// keys only on the hot key, blocking ones only where all pass, the sliding
// log only where none pass (its memory grows with the units it admits).
func rowApplies(p RatePeer, allow bool, nkeys int) bool {
	switch {
	case !p.Keyed && nkeys > 1:
		return false
	case p.Blocking && !allow:
		return false
	case p.Log && allow:
		return false
	}
	return true
}

// BenchmarkRateMemory compares in-memory decisions of loadshed's algorithms
// and the peers, in the same run, on the same work:
//
//   - allow: 10¹² per hour, burst 10¹²: every decision admits (an hour,
//     not a second: go-limiter's memorystore refills a bucket to
//     interval/tokens units per elapsed interval, which is 1 for 10⁹ per
//     second, and its rows then refuse);
//   - deny: 1 per hour, every key spent before the timer starts: every
//     decision refuses;
//   - keys=1: one hot key; keys=100000: keys taken in turn, each goroutine
//     from its own offset, every key created before the timer starts (the
//     rows measure existing keys, not inserts);
//   - serial: one goroutine; parallel: RunParallel, GOMAXPROCS goroutines.
//
// A row fails when a decision is not the one the row is about (beyond one
// re-admission per key should a window edge fall inside a deny row).
func BenchmarkRateMemory(b *testing.B) {
	for _, allow := range []bool{true, false} {
		path, n, per := "allow", int64(1e12), time.Hour
		if !allow {
			path, n, per = "deny", 1, time.Hour
		}
		for _, nkeys := range []int{1, manyKeys} {
			keys := makeKeys(nkeys)
			for _, parallel := range []bool{false, true} {
				run := "serial"
				if parallel {
					run = "parallel"
				}
				for _, p := range RatePeers() {
					if !rowApplies(p, allow, nkeys) {
						continue
					}
					d, err := p.New(n, per)
					if err != nil {
						b.Fatalf("%s: %v", p.Name, err)
					}
					for _, k := range keys {
						d.Allow(k) // creates the key; on deny rows spends it
					}
					name := path + "/keys=" + strconv.Itoa(nkeys) + "/" + run + "/peer=" + p.Name
					b.Run(name, func(b *testing.B) {
						if parallel {
							benchParallel(b, d, keys, allow)
						} else {
							benchSerial(b, d, keys, allow)
						}
					})
					_ = d.Close()
				}
			}
		}
	}
}

// tolerated is how many wrong decisions a row accepts: none on allow rows,
// one per key on deny rows (a window edge re-admits each key once).
func tolerated(allow bool, nkeys int) int64 {
	if allow {
		return 0
	}
	return int64(nkeys)
}

func benchSerial(b *testing.B, d Decider, keys []string, allow bool) {
	b.ReportAllocs()
	var wrong int64
	i := 0
	for b.Loop() {
		if d.Allow(keys[i]) != allow {
			wrong++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	if wrong > tolerated(allow, len(keys)) {
		b.Fatalf("%d of %d decisions were not %v", wrong, b.N, allow)
	}
}

func benchParallel(b *testing.B, d Decider, keys []string, allow bool) {
	b.ReportAllocs()
	var wrong, worker atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)*7919) % len(keys)
		var bad int64
		for pb.Next() {
			if d.Allow(keys[i]) != allow {
				bad++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		wrong.Add(bad)
	})
	if w := wrong.Load(); w > tolerated(allow, len(keys)) {
		b.Fatalf("%d of %d decisions were not %v", w, b.N, allow)
	}
}
