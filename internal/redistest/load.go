package redistest

import (
	"os"
	"sort"
	"sync"
	"time"
)

// Decision is what one request of a Drive run met.
type Decision struct {
	At       time.Time     // when it started
	Took     time.Duration // how long the layer took to decide
	Admitted bool
	Fallback bool  // decided by the local fallback
	Err      error // an error returned to the caller (not a rejection)
}

// Drive starts one request every 1/rate for d, each on its own goroutine,
// and returns every request's decision (in start order) once all ended.
// do runs one request and reports it; Drive sets At.
func Drive(rate int, d time.Duration, do func() Decision) []Decision {
	var mu sync.Mutex
	var out []Decision
	var wg sync.WaitGroup
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			r := do()
			r.At = began
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Summary is a Drive run in figures.
type Summary struct {
	Requests, Admitted, Fallbacks, Errors int
	MaxTook                               time.Duration
	FirstErr                              error
	FirstFallback, LastFallback           time.Time // zero without fallbacks
}

// Summarize reduces decisions to figures.
func Summarize(ds []Decision) Summary {
	var s Summary
	for _, d := range ds {
		s.Requests++
		s.MaxTook = max(s.MaxTook, d.Took)
		if d.Err != nil {
			s.Errors++
			if s.FirstErr == nil {
				s.FirstErr = d.Err
			}
			continue
		}
		if d.Admitted {
			s.Admitted++
		}
		if d.Fallback {
			s.Fallbacks++
			if s.FirstFallback.IsZero() {
				s.FirstFallback = d.At
			}
			s.LastFallback = d.At
		}
	}
	return s
}

// BackAfter is how long after ok the last fallback decision started (0
// when none did after ok): how long the layer took to come back to Redis
// once the cluster answered again.
func (s Summary) BackAfter(ok time.Time) time.Duration {
	if s.LastFallback.IsZero() || s.LastFallback.Before(ok) {
		return 0
	}
	return s.LastFallback.Sub(ok)
}

// ClusterLoadEnv, set to "full", runs the failover tests at full size
// (500 req/s for 15s, the master killed at 5s) instead of the suite's
// scaled-down one (200 req/s for 5s, killed at 1s).
const ClusterLoadEnv = "LOADSHED_CLUSTER_LOAD"

// FailoverLoad returns the failover tests' rate, run length and when the
// master is killed.
func FailoverLoad() (rate int, run, killAt time.Duration) {
	if os.Getenv(ClusterLoadEnv) == "full" {
		return 500, 15 * time.Second, 5 * time.Second
	}
	return 200, 5 * time.Second, time.Second
}
