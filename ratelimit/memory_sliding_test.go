package ratelimit

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// stepClock is a clock a test sets directly, with no timers (the stores'
// sweepers never fire).
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time                             { return c.t }
func (c *stepClock) AfterFunc(time.Duration, func()) shed.Timer { return noTimer{} }

type noTimer struct{}

func (noTimer) Stop() bool { return true }

// maxInAnyPeriod is the most instants of ts (sorted) within any span of
// period (half-open).
func maxInAnyPeriod(ts []time.Time, period time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= period {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// The sliding window counter's worst case is twice the limit in one rolling
// period, not 1.5×: the previous window's units all at its end, which the
// counter weighs as if spread over it, then the current window's near its
// end. 4 hosts on Redis admitted 38 for a limit of 20 (1.90×); this is
// the same sequence on one store, at fixed instants.
func TestSlidingWindowWorstCaseIsTwice(t *testing.T) {
	const q = 20
	clk := &stepClock{t: contractStart}
	m, err := NewMemory(SlidingWindow, PerSecond(q), MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var admitted []time.Time
	try := func(at time.Duration, n int) {
		clk.t = contractStart.Add(at)
		for i := 0; i < n; i++ {
			if res, _ := m.Allow(context.Background(), "k", 1); res.Allowed {
				admitted = append(admitted, clk.t)
			}
		}
	}
	try(999*time.Millisecond, 2*q)  // the end of window 0: the whole limit
	try(1950*time.Millisecond, 2*q) // window 1 weighs window 0 at 5%: nearly the limit again
	worst := maxInAnyPeriod(admitted, time.Second)
	t.Logf("sliding window counter: %d admitted within one rolling second for a limit of %d (%.2f×)", worst, q, float64(worst)/q)
	if worst <= 3*q/2 {
		t.Fatalf("%d admitted in one rolling period: the documented worst case (2×) is not reached", worst)
	}
	if worst > 2*q {
		t.Fatalf("%d admitted in one rolling period, above the documented bound 2 × %d", worst, q)
	}
}

// On a realistic arrival process (clients with Poisson arrivals at rates
// spread log-uniformly over a range of multiples of the limit), the
// share of the counter's decisions that the exact count of what it admitted
// in the last Period contradicts: admitted though the Period already held
// Quantity units, or refused though it had room. This is the measure behind
// Cloudflare's 0.003% (wrongly allowed or limited, on their traffic,
// where few clients reach their limit). docs/redis.md gives the figures.
func TestSlidingWindowErrorOnPoissonArrivals(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 20 s of 300 clients, twice")
	}
	// Rates as multiples of the limit: mostly below it, as on a service
	// where few clients reach their limit; and a third of the clients
	// above it.
	t.Run("mostly under", func(t *testing.T) { slidingWindowError(t, 0.001, 1.2, 0.15) })
	t.Run("many over", func(t *testing.T) { slidingWindowError(t, 0.1, 3, 0.35) })
}

// slidingWindowError fails when more than maxWrong of the decisions are
// wrong, or a client gets more than twice the limit in a rolling period.
func slidingWindowError(t *testing.T, lo, hi, maxWrong float64) {
	const (
		q       = 50
		period  = time.Second
		clients = 300
		periods = 20
	)
	type arrival struct {
		at  time.Duration
		key int
	}
	rng := rand.New(rand.NewPCG(11, 17))
	var arrivals []arrival
	for k := 0; k < clients; k++ {
		rate := float64(q) * lo * math.Pow(hi/lo, rng.Float64()) // per second
		for at := 0.0; ; {
			at += rng.ExpFloat64() / rate
			if at >= periods {
				break
			}
			arrivals = append(arrivals, arrival{time.Duration(at * float64(time.Second)), k})
		}
	}
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].at < arrivals[j].at })
	clk := &stepClock{}
	sw, _ := NewMemory(SlidingWindow, Per(q, period), MemoryConfig{Clock: clk})
	defer sw.Close()
	keys := make([]string, clients)
	for k := range keys {
		keys[k] = "client-" + strconv.Itoa(k)
	}
	admitted := make([][]time.Time, clients)
	first := make([]int, clients) // admitted[k][first[k]:] lie within the last Period
	falseAllow, falseRefuse, refused := 0, 0, 0
	ctx := context.Background()
	for _, a := range arrivals {
		clk.t = contractStart.Add(a.at)
		ts := admitted[a.key]
		for first[a.key] < len(ts) && clk.t.Sub(ts[first[a.key]]) >= period {
			first[a.key]++
		}
		room := len(ts)-first[a.key] < q
		res, _ := sw.Allow(ctx, keys[a.key], 1)
		switch {
		case res.Allowed && !room:
			falseAllow++
		case !res.Allowed && room:
			falseRefuse++
		}
		if res.Allowed {
			admitted[a.key] = append(ts, clk.t)
		} else {
			refused++
		}
	}
	worst := 0
	for _, ts := range admitted {
		worst = max(worst, maxInAnyPeriod(ts, period))
	}
	n := len(arrivals)
	t.Logf("%d decisions, %d refused; wrongly allowed %d (%.3f%%), wrongly refused %d (%.3f%%); "+
		"most admitted for one client in one rolling period: %d for a limit of %d (%.2f×)",
		n, refused, falseAllow, 100*float64(falseAllow)/float64(n), falseRefuse, 100*float64(falseRefuse)/float64(n),
		worst, q, float64(worst)/q)
	if worst > 2*q {
		t.Fatalf("%d admitted in one rolling period, above the bound 2 × %d", worst, q)
	}
	if wrong := falseAllow + falseRefuse; float64(wrong) > maxWrong*float64(n) {
		t.Fatalf("%d wrong decisions of %d: over %.1f%%", wrong, n, 100*maxWrong)
	}
}
