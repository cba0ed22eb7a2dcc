package layerkit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// pool is a layer's capacity as the queue sees it: slots claimed by an
// atomic compare-and-swap, the way real layers do it. It checks that
// capacity is never over-granted nor given back twice.
type pool struct {
	t        testing.TB
	size     int64
	free     atomic.Int64
	holding  atomic.Int64 // callers that own a slot right now
	maxHold  atomic.Int64
	giveBack atomic.Int64
	inTake   atomic.Bool // a take is running: takes for one queue must never overlap
}

func newPool(t testing.TB, size, free int64) *pool {
	p := &pool{t: t, size: size}
	p.free.Store(free)
	return p
}

func (p *pool) take() bool {
	if !p.inTake.CompareAndSwap(false, true) {
		p.t.Errorf("two takes ran at once")
	}
	defer p.inTake.Store(false)
	for {
		f := p.free.Load()
		if f <= 0 {
			return false
		}
		if p.free.CompareAndSwap(f, f-1) {
			return true
		}
	}
}

func (p *pool) put() {
	if f := p.free.Add(1); f > p.size {
		p.t.Errorf("pool has %d free slots of %d: a slot was given back twice", f, p.size)
	}
}

func (p *pool) back() { p.giveBack.Add(1); p.put() }

// hold records that a caller owns a slot, checking the bound at that instant.
func (p *pool) hold() {
	h := p.holding.Add(1)
	if h > p.size {
		p.t.Errorf("%d callers hold a slot of %d", h, p.size)
	}
	for {
		m := p.maxHold.Load()
		if h <= m || p.maxHold.CompareAndSwap(m, h) {
			break
		}
	}
}

func (p *pool) unhold() { p.holding.Add(-1); p.put() }

func newQueue(t testing.TB, cfg shed.QueueConfig) *layerkit.WaitQueue {
	t.Helper()
	q, err := layerkit.NewWaitQueue(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// waitLen spins until q holds n waiters. Real time bounds the spin only so
// that a broken queue fails the test instead of hanging it.
func waitLen(t testing.TB, q *layerkit.WaitQueue, n int) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for q.Len() != n {
		if time.Now().After(limit) {
			t.Fatalf("queue length %d, want %d", q.Len(), n)
		}
		runtime.Gosched()
	}
}

// grants records the order in which takes succeeded. Takes for one queue
// run one at a time, in dispatch order, so this is the grant order even when
// one Notify wakes several waiters whose results then race to a channel.
type grants struct {
	mu    sync.Mutex
	names []string
}

func (g *grants) take(name string, take func() bool) func() bool {
	return func() bool {
		if !take() {
			return false
		}
		g.mu.Lock()
		g.names = append(g.names, name)
		g.mu.Unlock()
		return true
	}
}

func (g *grants) order() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.names, " ")
}

type result struct {
	name   string
	waited time.Duration
	err    error
}

// waitAsync starts a waiter and waits until it has queued (Len grew by one),
// so that waiters started one after another queue in that order.
func waitAsync(t testing.TB, q *layerkit.WaitQueue, ctx context.Context, name string, p shed.Priority,
	deadline time.Time, take func() bool, giveBack func(), out chan<- result) {
	t.Helper()
	n := q.Len()
	go func() {
		d, err := q.Wait(ctx, p, deadline, take, giveBack)
		out <- result{name, d, err}
	}()
	waitLen(t, q, n+1)
}

func recv(t testing.TB, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter returned")
		return result{}
	}
}

func noResult(t testing.TB, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("waiter %s returned early: %v", r.name, r.err)
	default:
	}
}

func TestNewWaitQueueNamesBadFields(t *testing.T) {
	for _, tc := range []struct {
		cfg  shed.QueueConfig
		want []string
	}{
		{shed.QueueConfig{MaxWait: time.Second}, []string{"QueueConfig.MaxLength"}},
		{shed.QueueConfig{MaxLength: 1}, []string{"QueueConfig.MaxWait"}},
		{shed.QueueConfig{MaxLength: -1, MaxWait: -time.Second}, []string{"QueueConfig.MaxLength", "QueueConfig.MaxWait"}},
	} {
		q, err := layerkit.NewWaitQueue(tc.cfg)
		if err == nil || q != nil {
			t.Fatalf("NewWaitQueue(%+v) = %v, %v; want an error", tc.cfg, q, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("NewWaitQueue(%+v) error %q does not name %s", tc.cfg, err, w)
			}
		}
	}
	if _, err := layerkit.NewWaitQueue(shed.QueueConfig{MaxLength: 1, MaxWait: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
}

func TestWaitFastPath(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 1, MaxWait: time.Second, Clock: clock})
	p := newPool(t, 1, 1)
	d, err := q.Wait(context.Background(), shed.Default, time.Time{}, p.take, p.put)
	if err != nil || d != 0 {
		t.Fatalf("Wait on an empty queue with capacity = %v, %v; want 0, nil", d, err)
	}
	if q.Len() != 0 || clock.Pending() != 0 || p.free.Load() != 0 {
		t.Fatalf("fast path queued (len %d, timers %d) or did not take (free %d)", q.Len(), clock.Pending(), p.free.Load())
	}
	// Fast path wins even when the deadline has passed: no wait is needed.
	p.put()
	if _, err := q.Wait(context.Background(), shed.Default, t0.Add(-time.Second), p.take, p.put); err != nil {
		t.Fatal(err)
	}
}

func TestWaitFastPathAllocatesNothing(t *testing.T) {
	q := newQueue(t, shed.QueueConfig{MaxLength: 1, MaxWait: time.Second})
	p := newPool(t, 1, 1)
	take, put, ctx := p.take, p.put, context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := q.Wait(ctx, shed.Critical, time.Time{}, take, put); err != nil {
			t.Fatal(err)
		}
		put()
		q.Notify()
	})
	if allocs != 0 {
		t.Fatalf("Wait fast path + Notify allocate %v times per call, want 0", allocs)
	}
}

func TestWaitRejectsNilTake(t *testing.T) {
	q := newQueue(t, shed.QueueConfig{MaxLength: 1, MaxWait: time.Second})
	if _, err := q.Wait(context.Background(), shed.Default, time.Time{}, nil, nil); err == nil {
		t.Fatal("Wait with a nil take returned nil")
	}
}

func TestWaitOrderPriorityThenFIFO(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 100, MaxWait: time.Minute, Clock: clock})
	p := newPool(t, 1, 0)
	ctx := context.Background()
	out := make(chan result, 10)
	arrivals := []struct {
		name string
		p    shed.Priority
	}{
		{"s1", shed.Sheddable}, {"d1", shed.Default}, {"t1", shed.TestMode}, {"c1", shed.Critical},
		{"d2", shed.Default}, {"s2", shed.Sheddable}, {"c2", shed.Critical}, {"t2", shed.TestMode},
		{"d3", shed.Default},
	}
	for _, a := range arrivals {
		waitAsync(t, q, ctx, a.name, a.p, time.Time{}, p.take, p.put, out)
	}
	want := []string{"c1", "c2", "d1", "d2", "d3", "s1", "s2", "t1", "t2"}
	for i, w := range want {
		clock.Advance(time.Second)
		noResult(t, out)
		p.put()
		q.Notify()
		r := recv(t, out)
		if r.name != w || r.err != nil {
			t.Fatalf("grant %d went to %s (%v), want %s", i, r.name, r.err, w)
		}
		if wantWait := time.Duration(i+1) * time.Second; r.waited != wantWait {
			t.Errorf("%s waited %v, want %v", r.name, r.waited, wantWait)
		}
		if q.Len() != len(want)-i-1 {
			t.Fatalf("after grant %d len %d, want %d", i, q.Len(), len(want)-i-1)
		}
	}
	if clock.Pending() != 0 {
		t.Fatalf("%d timers left behind", clock.Pending())
	}
}

func TestWaitNewcomerDoesNotBarge(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Minute, Clock: clock})
	ctx := context.Background()
	out := make(chan result, 4)
	var g grants
	var bigOK atomic.Bool
	big := func() bool { return bigOK.Load() } // a costly request still waiting for room
	cheap := func() bool { return true }
	waitAsync(t, q, ctx, "big", shed.Default, time.Time{}, g.take("big", big), nil, out)

	// Capacity is free for a cheap request, but a waiter of its priority is
	// ahead: it must queue rather than slip past.
	waitAsync(t, q, ctx, "cheap", shed.Default, time.Time{}, g.take("cheap", cheap), nil, out)
	// A lower-priority newcomer queues too.
	waitAsync(t, q, ctx, "low", shed.Sheddable, time.Time{}, g.take("low", cheap), nil, out)
	noResult(t, out)
	if o := g.order(); o != "" {
		t.Fatalf("granted %q past a waiter that was first in line", o)
	}

	// A higher-priority newcomer is first in line, so it is served at once.
	d, err := q.Wait(ctx, shed.Critical, time.Time{}, g.take("critical", cheap), nil)
	if err != nil || d != 0 || g.order() != "critical" {
		t.Fatalf("critical newcomer: %v, %v, granted %q; want served at once", d, err, g.order())
	}

	bigOK.Store(true)
	q.Notify()
	for i := 0; i < 3; i++ {
		if r := recv(t, out); r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
	}
	if o := g.order(); o != "critical big cheap low" {
		t.Fatalf("grant order %q, want critical big cheap low", o)
	}
	if q.Len() != 0 || clock.Pending() != 0 {
		t.Fatalf("len %d, timers %d after all were served", q.Len(), clock.Pending())
	}
}

// TestWaitLeavingHeadUnblocksThoseBehind: a waiter first in line whose
// take fails (a costly request) holds up those behind it; when it times out
// or is cancelled, the queue must serve them at once, without waiting for
// the next Notify.
func TestWaitLeavingHeadUnblocksThoseBehind(t *testing.T) {
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			clock := shedtest.NewClock(t0)
			q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Second, Clock: clock})
			out := make(chan result, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			never := func() bool { return false }
			waitAsync(t, q, ctx, "big", shed.Critical, t0.Add(100*time.Millisecond), never, nil, out)
			waitAsync(t, q, context.Background(), "small", shed.Default, time.Time{}, func() bool { return true }, nil, out)
			noResult(t, out)
			if how == "timeout" {
				clock.Advance(100 * time.Millisecond)
			} else {
				cancel()
			}
			got := map[string]error{}
			for i := 0; i < 2; i++ {
				r := recv(t, out)
				got[r.name] = r.err
			}
			if got["big"] == nil || got["small"] != nil {
				t.Fatalf("big: %v, small: %v; want big gone and small served", got["big"], got["small"])
			}
		})
	}
}

func TestWaitFullAndEviction(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 3, MaxWait: time.Minute, Clock: clock})
	p := newPool(t, 10, 0)
	ctx := context.Background()
	out := make(chan result, 10)
	var g grants
	waitAsync(t, q, ctx, "A", shed.Sheddable, time.Time{}, g.take("A", p.take), p.put, out)
	waitAsync(t, q, ctx, "B", shed.Sheddable, time.Time{}, g.take("B", p.take), p.put, out)
	waitAsync(t, q, ctx, "C", shed.Default, time.Time{}, g.take("C", p.take), p.put, out)

	// Full: a critical newcomer evicts the newest of the lowest priority.
	clock.Advance(2 * time.Second)
	go func() {
		d, err := q.Wait(ctx, shed.Critical, time.Time{}, g.take("D", p.take), p.put)
		out <- result{"D", d, err}
	}()
	r := recv(t, out)
	if r.name != "B" || !errors.Is(r.err, layerkit.ErrEvicted) || r.waited != 2*time.Second {
		t.Fatalf("got %+v; want B evicted after 2s", r)
	}
	waitLen(t, q, 3)

	// A default newcomer evicts the remaining sheddable.
	go func() {
		d, err := q.Wait(ctx, shed.Default, time.Time{}, g.take("E", p.take), p.put)
		out <- result{"E", d, err}
	}()
	if r := recv(t, out); r.name != "A" || !errors.Is(r.err, layerkit.ErrEvicted) {
		t.Fatalf("got %+v; want A evicted", r)
	}
	waitLen(t, q, 3)

	// Nobody below default or sheddable is left: newcomers get ErrQueueFull
	// at once, without waiting.
	for _, pr := range []shed.Priority{shed.TestMode, shed.Sheddable, shed.Default} {
		d, err := q.Wait(ctx, pr, time.Time{}, p.take, p.put)
		if !errors.Is(err, layerkit.ErrQueueFull) || d != 0 {
			t.Fatalf("%v newcomer to a full queue: %v, %v; want ErrQueueFull at once", pr, d, err)
		}
	}
	if q.Len() != 3 {
		t.Fatalf("len %d, want 3", q.Len())
	}

	// Serve the rest: D (critical), then C and E (default, FIFO).
	p.free.Store(3)
	q.Notify()
	for i := 0; i < 3; i++ {
		if r := recv(t, out); r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
	}
	if o := g.order(); o != "D C E" {
		t.Fatalf("grant order %q, want D C E", o)
	}
	if clock.Pending() != 0 {
		t.Fatalf("%d timers left behind (evicted waiters' timers must be stopped)", clock.Pending())
	}
}

func TestWaitTimeout(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: 100 * time.Millisecond, Clock: clock})
	p := newPool(t, 1, 0)
	out := make(chan result, 2)
	waitAsync(t, q, context.Background(), "A", shed.Critical, time.Time{}, p.take, p.put, out)
	clock.Advance(99 * time.Millisecond)
	noResult(t, out)
	if q.Len() != 1 {
		t.Fatalf("len %d before MaxWait, want 1", q.Len())
	}
	clock.Advance(time.Millisecond)
	r := recv(t, out)
	if !errors.Is(r.err, layerkit.ErrQueueTimeout) || r.waited != 100*time.Millisecond {
		t.Fatalf("got %v after %v; want ErrQueueTimeout after 100ms", r.err, r.waited)
	}
	if q.Len() != 0 || clock.Pending() != 0 || p.free.Load() != 0 {
		t.Fatalf("after timeout: len %d, timers %d, free %d", q.Len(), clock.Pending(), p.free.Load())
	}
	// Capacity freed after the timeout goes to nobody: it stays in the pool.
	p.put()
	q.Notify()
	if p.free.Load() != 1 {
		t.Fatalf("a timed-out waiter took capacity")
	}
}

func TestWaitDeadline(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Second, Clock: clock})
	p := newPool(t, 1, 0)
	out := make(chan result, 2)
	ctx := context.Background()

	// A deadline sooner than MaxWait wins.
	waitAsync(t, q, ctx, "soon", shed.Default, t0.Add(30*time.Millisecond), p.take, p.put, out)
	// A deadline later than MaxWait does not extend it.
	waitAsync(t, q, ctx, "late", shed.Default, t0.Add(time.Hour), p.take, p.put, out)
	clock.Advance(29 * time.Millisecond)
	noResult(t, out)
	clock.Advance(time.Millisecond)
	if r := recv(t, out); r.name != "soon" || !errors.Is(r.err, layerkit.ErrQueueTimeout) || r.waited != 30*time.Millisecond {
		t.Fatalf("got %+v; want soon to time out after 30ms", r)
	}
	clock.Advance(970 * time.Millisecond)
	if r := recv(t, out); r.name != "late" || !errors.Is(r.err, layerkit.ErrQueueTimeout) || r.waited != time.Second {
		t.Fatalf("got %+v; want late to time out after MaxWait", r)
	}

	// A deadline already passed fails at once, without queueing.
	d, err := q.Wait(ctx, shed.Critical, clock.Now(), p.take, p.put)
	if !errors.Is(err, layerkit.ErrQueueTimeout) || d != 0 || q.Len() != 0 || clock.Pending() != 0 {
		t.Fatalf("past deadline: %v, %v, len %d, timers %d", d, err, q.Len(), clock.Pending())
	}
}

func TestWaitContextCancelled(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Second, Clock: clock})
	p := newPool(t, 1, 0)
	out := make(chan result, 2)
	ctx, cancel := context.WithCancel(context.Background())
	waitAsync(t, q, ctx, "A", shed.Default, time.Time{}, p.take, p.put, out)
	waitAsync(t, q, context.Background(), "B", shed.Default, time.Time{}, p.take, p.put, out)
	clock.Advance(10 * time.Millisecond)
	cancel()
	r := recv(t, out)
	if r.name != "A" || !errors.Is(r.err, context.Canceled) || r.waited != 10*time.Millisecond {
		t.Fatalf("got %+v; want A cancelled after 10ms", r)
	}
	if q.Len() != 1 || clock.Pending() != 1 {
		t.Fatalf("len %d, timers %d; want only B left", q.Len(), clock.Pending())
	}
	p.put()
	q.Notify()
	if r := recv(t, out); r.name != "B" || r.err != nil {
		t.Fatalf("got %+v; want B granted", r)
	}

	// A context already done does not queue.
	if _, err := q.Wait(ctx, shed.Default, time.Time{}, p.take, p.put); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done context and no capacity: %v; want context.Canceled", err)
	}
	if q.Len() != 0 || clock.Pending() != 0 {
		t.Fatalf("len %d, timers %d", q.Len(), clock.Pending())
	}
}

// TestWaitGrantAtCancelHandedOn grants a waiter its capacity at the very
// instant its context ends (take cancels it): the capacity must be given
// back and passed to the next waiter, whichever way the waiter's select
// goes. Repeated so that both ways are taken.
func TestWaitGrantAtCancelHandedOn(t *testing.T) {
	for i := 0; i < 200; i++ {
		q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Minute})
		p := newPool(t, 1, 0)
		out := make(chan result, 2)
		ctx, cancel := context.WithCancel(context.Background())
		takeAndLeave := func() bool {
			if p.take() {
				cancel()
				return true
			}
			return false
		}
		waitAsync(t, q, ctx, "leaver", shed.Critical, time.Time{}, takeAndLeave, p.back, out)
		waitAsync(t, q, context.Background(), "next", shed.Sheddable, time.Time{}, p.take, p.back, out)
		p.put()
		q.Notify()
		got := map[string]error{}
		for j := 0; j < 2; j++ {
			r := recv(t, out)
			got[r.name] = r.err
		}
		if !errors.Is(got["leaver"], context.Canceled) {
			t.Fatalf("leaver: %v; want context.Canceled", got["leaver"])
		}
		if got["next"] != nil {
			t.Fatalf("next: %v; want the capacity the leaver gave back", got["next"])
		}
		if p.giveBack.Load() != 1 || p.free.Load() != 0 || q.Len() != 0 {
			t.Fatalf("giveBack %d, free %d, len %d; want 1, 0, 0", p.giveBack.Load(), p.free.Load(), q.Len())
		}
		cancel()
	}
}

// TestWaitReleaseCancelRace races a release against a cancellation many
// times; the slot must end up with the survivor or back in the pool.
func TestWaitReleaseCancelRace(t *testing.T) {
	for i := 0; i < 500; i++ {
		q := newQueue(t, shed.QueueConfig{MaxLength: 10, MaxWait: time.Minute})
		p := newPool(t, 1, 0)
		out := make(chan result, 2)
		ctx, cancel := context.WithCancel(context.Background())
		waitAsync(t, q, ctx, "A", shed.Default, time.Time{}, p.take, p.back, out)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.put(); q.Notify() }()
		go func() { defer wg.Done(); cancel() }()
		wg.Wait()
		r := recv(t, out)
		if r.err == nil {
			p.put() // A owned the slot; done with it
		} else if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("A: %v", r.err)
		}
		if p.free.Load() != 1 || q.Len() != 0 {
			t.Fatalf("round %d: free %d, len %d; want the slot back and an empty queue", i, p.free.Load(), q.Len())
		}
	}
}

func TestWaitAdaptiveLIFO(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 4, MaxWait: 100 * time.Millisecond, Clock: clock, AdaptiveLIFO: true})
	p := newPool(t, 10, 0)
	ctx := context.Background()
	out := make(chan result, 10)
	grantOne := func(want string) {
		t.Helper()
		p.put()
		q.Notify()
		if r := recv(t, out); r.name != want || r.err != nil {
			t.Fatalf("got %s (%v), want %s", r.name, r.err, want)
		}
	}

	// Within MaxWait/2 of the queue filling: FIFO.
	for _, n := range []string{"a1", "a2", "a3"} {
		waitAsync(t, q, ctx, n, shed.Default, time.Time{}, p.take, p.put, out)
	}
	clock.Advance(50 * time.Millisecond)
	grantOne("a1")

	// Non-empty for longer than MaxWait/2: newest first.
	waitAsync(t, q, ctx, "a4", shed.Default, time.Time{}, p.take, p.put, out)
	clock.Advance(time.Millisecond)
	grantOne("a4")
	// Still LIFO; priority still comes first.
	waitAsync(t, q, ctx, "c1", shed.Critical, time.Time{}, p.take, p.put, out)
	waitAsync(t, q, ctx, "a5", shed.Default, time.Time{}, p.take, p.put, out)
	// Full; while LIFO serves the newest, a critical newcomer evicts the
	// oldest of the lowest priority: the one that would be served last.
	go func() {
		d, err := q.Wait(ctx, shed.Critical, time.Time{}, p.take, p.put)
		out <- result{"c2", d, err}
	}()
	if r := recv(t, out); r.name != "a2" || !errors.Is(r.err, layerkit.ErrEvicted) {
		t.Fatalf("got %+v; want a2 evicted", r)
	}
	waitLen(t, q, 4)
	// Full, with nobody below default: a default newcomer takes the place
	// of the oldest default, which newest first would serve last.
	go func() {
		d, err := q.Wait(ctx, shed.Default, time.Time{}, p.take, p.put)
		out <- result{"a6", d, err}
	}()
	if r := recv(t, out); r.name != "a3" || !errors.Is(r.err, layerkit.ErrQueueFull) {
		t.Fatalf("got %+v; want a3 displaced", r)
	}
	waitLen(t, q, 4)
	grantOne("c2")
	grantOne("c1")
	grantOne("a6")
	grantOne("a5")

	// Once empty, the queue is FIFO again.
	waitAsync(t, q, ctx, "b1", shed.Default, time.Time{}, p.take, p.put, out)
	waitAsync(t, q, ctx, "b2", shed.Default, time.Time{}, p.take, p.put, out)
	grantOne("b1")
	grantOne("b2")
}

func TestQueueRejection(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{layerkit.ErrQueueFull, "queue full"},
		{layerkit.ErrQueueTimeout, "queue wait timed out"},
		{layerkit.ErrEvicted, "evicted by higher-priority request"},
	} {
		err := layerkit.QueueRejection(shed.StatusServiceUnavailable, tc.err, 3*time.Second)
		var rej *shed.Rejection
		if !errors.As(err, &rej) {
			t.Fatalf("QueueRejection(%v) = %v; want a *Rejection", tc.err, err)
		}
		if rej.Layer != "" || rej.Status != 503 || rej.Reason != tc.reason ||
			rej.Priority != shed.Unset || rej.Waited != 3*time.Second || !errors.Is(err, shed.ErrRejected) {
			t.Errorf("QueueRejection(%v) = %+v", tc.err, rej)
		}
	}
	if err := layerkit.QueueRejection(429, nil, 0); err != nil {
		t.Errorf("QueueRejection(nil) = %v", err)
	}
	ctxErr := errors.Join(errors.New("gave up"), context.Canceled)
	if err := layerkit.QueueRejection(429, ctxErr, time.Second); err != ctxErr {
		t.Errorf("QueueRejection(context error) = %v; want it unchanged", err)
	}
}

// TestWaitStress runs thousands of waiters over every priority against a
// small pool, with random cancellations, timeouts (a driver advances the
// manual clock), evictions from a bounded queue and random hold times. At
// every instant no more callers hold a slot than there are slots; at the
// end every slot is back, the queue is empty and no timer is left.
func TestWaitStress(t *testing.T) {
	const (
		waiters = 5000
		slots   = 8
	)
	base := runtime.NumGoroutine()
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 1000, MaxWait: 20 * time.Millisecond, Clock: clock})
	p := newPool(t, slots, slots)
	prios := shed.Priorities()

	var outcomes [5]atomic.Int64 // granted, cancelled, timed out, evicted, full
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 42))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if rng.IntN(5) == 0 {
				spins := rng.IntN(50)
				go func() {
					for n := spins; n > 0; n-- {
						runtime.Gosched()
					}
					cancel()
				}()
			}
			var deadline time.Time
			if rng.IntN(4) == 0 {
				deadline = clock.Now().Add(time.Duration(rng.IntN(30)) * time.Millisecond)
			}
			_, err := q.Wait(ctx, prios[rng.IntN(len(prios))], deadline, p.take, p.back)
			switch {
			case err == nil:
				outcomes[0].Add(1)
				p.hold()
				for n := rng.IntN(20); n > 0; n-- {
					runtime.Gosched()
				}
				p.unhold()
				q.Notify()
			case errors.Is(err, context.Canceled):
				outcomes[1].Add(1)
			case errors.Is(err, layerkit.ErrQueueTimeout):
				outcomes[2].Add(1)
			case errors.Is(err, layerkit.ErrEvicted):
				outcomes[3].Add(1)
			case errors.Is(err, layerkit.ErrQueueFull):
				outcomes[4].Add(1)
			default:
				t.Errorf("unexpected error %v", err)
			}
		}(uint64(i))
		if i%50 == 0 {
			runtime.Gosched() // spread arrivals, so the queue both fills and drains
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	ticker := 0
drive:
	for {
		select {
		case <-done:
			break drive
		default:
		}
		runtime.Gosched()
		if ticker++; ticker%50 == 0 {
			clock.Advance(time.Millisecond)
		}
	}

	if f := p.free.Load(); f != slots {
		t.Errorf("%d of %d slots back in the pool: capacity not conserved", f, slots)
	}
	if q.Len() != 0 {
		t.Errorf("len %d after every waiter returned", q.Len())
	}
	if n := clock.Pending(); n != 0 {
		t.Errorf("%d timers left behind", n)
	}
	var total int64
	for i := range outcomes {
		total += outcomes[i].Load()
	}
	if total != waiters {
		t.Errorf("%d outcomes for %d waiters", total, waiters)
	}
	for i, what := range []string{"granted", "cancelled", "timed out", "evicted"} {
		if outcomes[i].Load() == 0 {
			t.Errorf("no waiter was %s: the stress did not exercise that path", what)
		}
	}
	// Nothing is left behind: the waiters, their cancellers and the timers'
	// callbacks have all returned. Real time bounds the spin only.
	for limit := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; {
		if time.Now().After(limit) {
			t.Errorf("%d goroutines, %d before the test: leaked", runtime.NumGoroutine(), base)
			break
		}
		runtime.Gosched()
	}
	t.Logf("granted %d, cancelled %d, timed out %d, evicted %d, full %d; gave back %d; max holding %d",
		outcomes[0].Load(), outcomes[1].Load(), outcomes[2].Load(), outcomes[3].Load(), outcomes[4].Load(),
		p.giveBack.Load(), p.maxHold.Load())
}

// TestWaitQueueLowestAndEvict: what a layer bounding several queues
// together uses to evict as one full queue would.
func TestWaitQueueLowestAndEvict(t *testing.T) {
	clock := shedtest.NewClock(t0)
	q := newQueue(t, shed.QueueConfig{MaxLength: 5, MaxWait: time.Minute, Clock: clock})
	p := newPool(t, 10, 0)
	ctx := context.Background()
	if _, ok := q.Lowest(); ok || q.Evict(shed.Critical) {
		t.Fatal("an empty queue has a lowest waiter")
	}
	out := make(chan result, 5)
	var g grants
	waitAsync(t, q, ctx, "A", shed.Default, time.Time{}, g.take("A", p.take), p.put, out)
	waitAsync(t, q, ctx, "B", shed.Sheddable, time.Time{}, g.take("B", p.take), p.put, out)
	waitAsync(t, q, ctx, "C", shed.Sheddable, time.Time{}, g.take("C", p.take), p.put, out)
	if lp, ok := q.Lowest(); !ok || lp != shed.Sheddable {
		t.Fatalf("Lowest = %v, %v; want sheddable", lp, ok)
	}
	if q.Evict(shed.Sheddable) {
		t.Fatal("evicted a waiter of the newcomer's own priority")
	}
	if !q.Evict(shed.Default) {
		t.Fatal("nothing evicted below default")
	}
	if r := recv(t, out); r.name != "C" || !errors.Is(r.err, layerkit.ErrEvicted) {
		t.Fatalf("got %+v; want C (the sheddable served last) evicted", r)
	}
	if q.Len() != 2 {
		t.Fatalf("len %d, want 2", q.Len())
	}
	p.free.Store(2)
	q.Notify()
	for i := 0; i < 2; i++ {
		if r := recv(t, out); r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
	}
}

// Standing is how long the queue has held waiters without emptying: 0
// when empty, from the moment the first joined an empty queue, and back to
// 0 once it empties, whatever joined and left in between.
func TestWaitQueueStanding(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(0, 0))
	q, err := layerkit.NewWaitQueue(shed.QueueConfig{MaxLength: 4, MaxWait: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if s := q.Standing(clock.Now()); s != 0 {
		t.Fatalf("empty queue standing %v", s)
	}
	var free atomic.Bool
	take := func() bool { return free.CompareAndSwap(true, false) }
	done := make(chan error, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			_, err := q.Wait(context.Background(), shed.Default, time.Time{}, take, nil)
			done <- err
		}()
		for q.Len() != i {
			time.Sleep(time.Millisecond)
		}
		clock.Advance(30 * time.Millisecond)
	}
	if s := q.Standing(clock.Now()); s != 60*time.Millisecond {
		t.Fatalf("queue non-empty for 60ms with two joining: standing %v", s)
	}
	for i := 0; i < 2; i++ {
		free.Store(true)
		q.Notify()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s := q.Standing(clock.Now()); s != 0 {
		t.Fatalf("emptied queue standing %v", s)
	}
}
