package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// contractStore builds the limiters the contract suite runs against. Other
// stores join the suite by appending to contractStores from an init func in
// their own test file (redis_contract_test.go does).
type contractStore struct {
	name string
	// open returns a new limiter for alg and limit whose keys no other test
	// sees, reading time fixed at start, and a function that moves that time
	// forward to an instant. It may skip t (a store that is unavailable).
	open func(t *testing.T, alg Algorithm, limit Limit, start time.Time) (l Store, set func(time.Time))
}

var contractStores = []contractStore{{name: "memory", open: openMemory}}

func openMemory(t *testing.T, alg Algorithm, limit Limit, start time.Time) (Store, func(time.Time)) {
	t.Helper()
	clk := shedtest.NewClock(start)
	m, err := NewMemory(alg, limit, MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatalf("NewMemory(%v, %v): %v", alg, limit, err)
	}
	t.Cleanup(func() { m.Close() })
	return m, clk.Set
}

// contractStart is aligned on every window the cases use (whole seconds,
// minutes), so window edges fall on round offsets.
var contractStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	stepAllow = iota
	stepRefund
)

// step is one call at a fixed instant, and what it must return.
type step struct {
	at   time.Duration // since contractStart
	op   int
	key  string // default "k"
	cost int64
	// want is compared field by field (Limit is the limit's Quantity).
	want Result
	// err, when set, is what errors.Is must match; want is then ignored.
	err error
}

// allow and deny build the common steps.
func allow(at time.Duration, cost, remaining int64, reset time.Duration) step {
	return step{at: at, cost: cost, want: Result{Allowed: true, Remaining: remaining, ResetAfter: reset}}
}

func deny(at time.Duration, cost, remaining int64, retry, reset time.Duration) step {
	return step{at: at, cost: cost, want: Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

func refund(at time.Duration, cost int64) step { return step{at: at, op: stepRefund, cost: cost} }

func fails(at time.Duration, key string, cost int64, err error) step {
	return step{at: at, key: key, cost: cost, err: err}
}

func onKey(key string, s step) step { s.key = key; return s }

type contractCase struct {
	name  string
	algs  []Algorithm
	limit Limit
	steps []step
}

const ms = time.Millisecond

var (
	buckets = []Algorithm{TokenBucket, LeakyBucket}
	allAlgs = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow}
	longKey = strings.Repeat("k", 10_000)
	oddKey  = "{user}:a b\r\nc\x00%}{"
)

// contractCases are the step tables. Every figure is exact for its
// algorithm, so a store that rounds or counts differently fails.
var contractCases = []contractCase{
	{
		// T = 250ms, τ = 1s.
		name: "bucket", algs: buckets, limit: Limit{Quantity: 4, Period: time.Second, Burst: 4},
		steps: []step{
			allow(0, 1, 3, 250*ms),
			allow(0, 3, 0, time.Second),
			deny(0, 1, 0, 250*ms, time.Second),
			deny(100*ms, 1, 0, 150*ms, 900*ms),
			allow(250*ms, 1, 0, time.Second),
			deny(250*ms, 2, 0, 500*ms, time.Second),
			// full again once TAT (1.25s) has passed: the whole burst at once
			allow(1250*ms, 4, 0, time.Second),
			refund(1250*ms, 2),
			allow(1250*ms, 1, 1, 750*ms),
			// remaining is the tokens left, even when a costlier request is denied
			allow(3*time.Second, 2, 2, 500*ms),
			deny(3*time.Second, 3, 2, 250*ms, 500*ms),
			fails(3*time.Second, "k", 5, ErrCostAboveBurst),
			fails(3*time.Second, "k", 0, ErrInvalidCost),
			fails(3*time.Second, "k", -1, ErrInvalidCost),
			fails(3*time.Second, "", 1, ErrEmptyKey),
			// keys are independent, whatever their bytes
			onKey("other", allow(3*time.Second, 4, 0, time.Second)),
			onKey(oddKey, allow(3*time.Second, 4, 0, time.Second)),
			onKey(longKey, allow(3*time.Second, 3, 1, 750*ms)),
			onKey(longKey+"x", allow(3*time.Second, 4, 0, time.Second)),
			onKey(longKey, deny(3*time.Second, 2, 1, 250*ms, 750*ms)),
		},
	},
	{
		// Burst below quantity: T = 1s, τ = 2s.
		name: "bucket-burst", algs: buckets, limit: Limit{Quantity: 10, Period: 10 * time.Second, Burst: 2},
		steps: []step{
			allow(0, 1, 1, time.Second),
			allow(0, 1, 0, 2*time.Second),
			deny(0, 1, 0, time.Second, 2*time.Second),
			allow(time.Second, 1, 0, 2*time.Second),
			deny(1500*ms, 2, 0, 1500*ms, 1500*ms),
			fails(1500*ms, "k", 3, ErrCostAboveBurst),
			// a refund never fills the bucket beyond its burst
			refund(1500*ms, 2),
			refund(1500*ms, 2),
			allow(1500*ms, 2, 0, 2*time.Second),
		},
	},
	{
		name: "fixed-window", algs: []Algorithm{FixedWindow}, limit: PerSecond(4),
		steps: []step{
			allow(0, 1, 3, time.Second),
			allow(200*ms, 3, 0, 800*ms),
			deny(500*ms, 1, 0, 500*ms, 500*ms),
			deny(999*ms, 1, 0, 1*ms, 1*ms),
			// the window edge: a full window again, 8 units within 1ms
			allow(time.Second, 4, 0, time.Second),
			refund(1500*ms, 2),
			allow(1500*ms, 2, 0, 500*ms),
			deny(1500*ms, 1, 0, 500*ms, 500*ms),
			// units taken in an ended window are not given back to the new one
			refund(2500*ms, 3),
			allow(2500*ms, 1, 3, 500*ms),
			allow(2500*ms, 3, 0, 500*ms),
			deny(2500*ms, 1, 0, 500*ms, 500*ms),
			fails(2500*ms, "k", 5, ErrCostAboveBurst),
			onKey(oddKey, allow(2500*ms, 4, 0, 500*ms)),
			onKey(longKey, allow(2500*ms, 2, 2, 500*ms)),
		},
	},
	{
		name: "sliding-log", algs: []Algorithm{SlidingLog}, limit: PerSecond(4),
		steps: []step{
			allow(0, 1, 3, time.Second),
			allow(200*ms, 2, 1, time.Second),
			allow(400*ms, 1, 0, time.Second),
			deny(500*ms, 1, 0, 500*ms, 900*ms),
			// three units must expire: the one at 0 and the two at 200ms
			deny(500*ms, 3, 0, 700*ms, 900*ms),
			// an entry stops counting exactly one period after it was taken
			allow(time.Second, 1, 0, time.Second),
			deny(time.Second, 1, 0, 200*ms, time.Second),
			allow(1200*ms, 2, 0, time.Second),
			refund(1200*ms, 1),
			allow(1200*ms, 1, 0, time.Second),
			// no edge burst: the 400ms unit has gone, the others hold
			allow(1999*ms, 1, 0, time.Second),
			deny(1999*ms, 1, 0, 1*ms, time.Second),
			allow(3*time.Second, 4, 0, time.Second),
			fails(3*time.Second, "k", 5, ErrCostAboveBurst),
			onKey(oddKey, allow(3*time.Second, 1, 3, time.Second)),
		},
	},
	{
		// used = cur + ⌈prev·(1s − elapsed)/1s⌉
		name: "sliding-window", algs: []Algorithm{SlidingWindow}, limit: PerSecond(4),
		steps: []step{
			allow(0, 1, 3, 2*time.Second),
			allow(0, 3, 0, 2*time.Second),
			// over in this window; in the next one, prev = 4 weighs ≤ 3 after 250ms
			deny(500*ms, 1, 0, 750*ms, 1500*ms),
			// at 1.1s prev weighs ⌈4·0.9⌉ = 4: rounded up, never down
			deny(1100*ms, 1, 0, 150*ms, 900*ms),
			// at 1.25s prev weighs 3
			allow(1250*ms, 1, 0, 1750*ms),
			deny(1250*ms, 1, 0, 250*ms, 1750*ms),
			allow(1500*ms, 1, 0, 1500*ms),
			refund(1500*ms, 1),
			allow(1500*ms, 1, 0, 1500*ms),
			// two windows later nothing weighs
			allow(3*time.Second, 4, 0, 2*time.Second),
			fails(3*time.Second, "k", 5, ErrCostAboveBurst),
			onKey(oddKey, allow(3*time.Second, 2, 2, 2*time.Second)),
		},
	},
}

func TestContract(t *testing.T) {
	for _, st := range contractStores {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range contractCases {
				for _, alg := range c.algs {
					t.Run(c.name+"/"+alg.String(), func(t *testing.T) {
						runSteps(t, st, alg, c.limit, c.steps)
					})
				}
			}
		})
	}
}

func runSteps(t *testing.T, st contractStore, alg Algorithm, limit Limit, steps []step) {
	t.Helper()
	l, set := st.open(t, alg, limit, contractStart)
	if l.Algorithm() != alg || l.Limit() != limit {
		t.Fatalf("limiter reports %v %v, want %v %v", l.Algorithm(), l.Limit(), alg, limit)
	}
	ctx := context.Background()
	for i, s := range steps {
		set(contractStart.Add(s.at))
		key := s.key
		if key == "" && s.err == nil {
			key = "k"
		}
		if s.op == stepRefund {
			if err := l.Refund(ctx, key, s.cost); err != nil {
				t.Fatalf("step %d: Refund(%d) at +%v: %v", i, s.cost, s.at, err)
			}
			continue
		}
		got, err := l.Allow(ctx, key, s.cost)
		if s.err != nil {
			if !errors.Is(err, s.err) {
				t.Fatalf("step %d: Allow(key %.20q, cost %d) at +%v: error %v, want %v", i, key, s.cost, s.at, err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: Allow(cost %d) at +%v: %v", i, s.cost, s.at, err)
		}
		want := s.want
		want.Limit = limit.Quantity
		if got != want {
			t.Fatalf("step %d: Allow(key %.20q, cost %d) at +%v:\n got %+v\nwant %+v", i, key, s.cost, s.at, got, want)
		}
	}
}

// seeded returns a source of numbers below n (xorshift from seed): the same
// sequence every run.
func seeded(seed uint64) func(n uint64) int64 {
	rng := seed
	return func(n uint64) int64 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int64(rng % n)
	}
}

// TestContractNeverOver drives every algorithm with a random but seeded
// sequence of requests and checks what each admits against its own bound:
// the buckets never more than Burst + elapsed/T over any interval, the
// sliding log never more than Quantity within any Period, the windows never
// more than Quantity within one aligned window.
func TestContractNeverOver(t *testing.T) {
	limit := Limit{Quantity: 10, Period: time.Second, Burst: 5}
	for _, st := range contractStores {
		for _, alg := range allAlgs {
			t.Run(st.name+"/"+alg.String(), func(t *testing.T) {
				l, set := st.open(t, alg, limit, contractStart)
				type grant struct{ at, cost int64 }
				var got []grant
				next := seeded(42)
				now := int64(0)
				for i := 0; i < 600; i++ {
					now += next(uint64(limit.Period / 8))
					set(contractStart.Add(time.Duration(now)))
					cost := 1 + next(3)
					r, err := l.Allow(context.Background(), "k", cost)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						got = append(got, grant{now, cost})
					}
					if r.Remaining < 0 || r.RetryAfter < 0 || r.ResetAfter < 0 || r.Allowed == (r.RetryAfter > 0) {
						t.Fatalf("request %d: inconsistent figures %+v", i, r)
					}
				}
				if len(got) < 50 {
					t.Fatalf("only %d requests admitted: the test exercises nothing", len(got))
				}
				p := int64(limit.Period)
				for i := range got {
					sum := int64(0)
					for j := i; j < len(got); j++ {
						sum += got[j].cost
						span := got[j].at - got[i].at
						var bound int64
						switch alg {
						case TokenBucket, LeakyBucket:
							bound = limit.Burst + span/int64(limit.Interval())
						case SlidingLog:
							if span >= p {
								continue
							}
							bound = limit.Quantity
						default:
							if floorTo(got[j].at, p) != floorTo(got[i].at, p) {
								continue
							}
							bound = limit.Quantity
						}
						if sum > bound {
							t.Fatalf("admitted %d units from +%v to +%v, bound %d", sum,
								time.Duration(got[i].at), time.Duration(got[j].at), bound)
						}
					}
				}
			})
		}
	}
}
