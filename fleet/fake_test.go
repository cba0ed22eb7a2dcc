package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeFleet stands in for Redis in tests of the layer's logic: the entries
// of several instances, expiring by a manual clock that plays the server's.
type fakeFleet struct {
	clock *shedtest.Clock
	mu    sync.Mutex
	ents  map[string]fakeEntry
	down  bool
	calls int
}

type fakeEntry struct {
	counts  [shed.NumPriorities]int64
	expires time.Time
}

func newFakeFleet(c *shedtest.Clock) *fakeFleet {
	return &fakeFleet{clock: c, ents: map[string]fakeEntry{}}
}

var errFakeDown = errors.New("fake redis is down")

func (f *fakeFleet) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

type fakeStore struct {
	f  *fakeFleet
	id string
}

func (s fakeStore) sync(_ context.Context, c [shed.NumPriorities]int64, ttl time.Duration) (reading, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return reading{}, errFakeDown
	}
	now := f.clock.Now()
	for id, e := range f.ents {
		if !e.expires.After(now) {
			delete(f.ents, id)
		}
	}
	if ttl > 0 {
		f.ents[s.id] = fakeEntry{counts: c, expires: now.Add(ttl)}
	} else {
		delete(f.ents, s.id)
	}
	r := reading{live: len(f.ents), at: now}
	for _, e := range f.ents {
		for i := range r.totals {
			r.totals[i] += e.counts[i]
		}
	}
	return r, nil
}

// fakeConfig is a valid Config for newLayer over a fake store.
func fakeConfig(clk *shedtest.Clock) Config {
	return Config{Capacity: 100, Interval: 100 * time.Millisecond, Clock: clk}.withDefaults()
}

func newFake(t *testing.T, f *fakeFleet, id string, cfg Config) *Layer {
	t.Helper()
	cfg.Instance = id
	s, err := newLayer(cfg.withDefaults(), fakeStore{f: f, id: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.halt() })
	return s
}

// admit acquires n leases of priority p and fails the test unless all are
// granted.
func admit(t *testing.T, s *Layer, p shed.Priority, n int) []shed.Lease {
	t.Helper()
	out := make([]shed.Lease, 0, n)
	for i := 0; i < n; i++ {
		ls, err := s.Acquire(context.Background(), shed.Request{Priority: p})
		if err != nil {
			t.Fatalf("%s request %d of %d: %v", p, i+1, n, err)
		}
		out = append(out, ls)
	}
	return out
}

// refused asserts that one more request of priority p is rejected with a
// 503 whose Retry-After is the interval.
func refused(t *testing.T, s *Layer, p shed.Priority) *shed.Rejection {
	t.Helper()
	ls, err := s.Acquire(context.Background(), shed.Request{Priority: p})
	if err == nil {
		ls.Release(shed.Unused)
		t.Fatalf("%s request admitted; stats %+v", p, s.Stats())
	}
	r := shedtest.Rejection(t, err)
	// Layer and Priority are the chain's to stamp: Acquire leaves them.
	if r.Status != 503 || r.RetryAfter != s.retryAfter ||
		len(r.Policies) != 1 || !r.Policies[0].Service || r.Policies[0].Policy != PolicyName || r.Policies[0].Limit != s.Stats().Ceilings[p.Index()] {
		t.Fatalf("rejection %+v", r)
	}
	return r
}

func releaseAll(ls []shed.Lease) {
	for i := range ls {
		ls[i].Release(shed.Completed)
	}
}

// settle advances the clock two intervals of fakeConfig: every instance
// has published, and every one has read what the others published.
func settle(clk *shedtest.Clock) {
	clk.Advance(100 * time.Millisecond)
	clk.Advance(100 * time.Millisecond)
}
