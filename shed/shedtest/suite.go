package shedtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// LayerSuite describes a layer to RunLayerSuite: how to build one, and what
// a fresh one admits. Every layer in this repository runs the suite; a
// layer of your own should too.
//
// The suite's checks count admissions, so the layer New builds must be in
// a known state: with time standing still (the suite hands New a manual
// Clock; a layer on a store with its own clock, such as Redis, needs a
// window long enough that nothing refills during the test), a fresh layer
// admits exactly Capacity copies of Request at once and rejects the next
// one, until leases are released.
type LayerSuite struct {
	// New builds a fresh layer, whose state no other call shares (use a
	// unique key prefix on a shared store). clock is the suite's manual
	// clock: give it to the layer (and to its queue) so that the suite
	// moves time. Required.
	New func(t testing.TB, clock *Clock) shed.Layer
	// NewQueued, when set, builds a fresh layer like New's but whose action
	// is to queue (shed.Queue) rather than reject, with a queue long
	// enough for one waiter and a MaxWait of at least a minute: the suite
	// then checks cancellation and deadlines while queued. The layer must
	// report its waiters with a Queued() int method.
	NewQueued func(t testing.TB, clock *Clock) shed.Layer
	// NewSoft, when set, builds a fresh layer like New's in soft mode:
	// shed.Enforcement{Mode: shed.Soft, OverageFor: SoftOverageFor}, the
	// default Overage and OverageCooldown, so that it admits at least one
	// request over Capacity. The suite then checks the soft-mode episode
	// rule (see RunLayerSuite). It needs an outcome that Frees.
	NewSoft func(t testing.TB, clock *Clock) shed.Layer
	// Request is what the suite sends (default: Key "shedtest", Route
	// "GET /shedtest", Default priority, cost 1).
	Request shed.Request
	// Capacity is how many Requests a fresh layer admits at once before it
	// rejects. Required, at least 1.
	Capacity int
	// Frees says whether releasing a lease with outcome o gives its unit
	// back at once: every outcome for a limit on requests in flight (the
	// default); only shed.Unused, a refund, for a rate limit.
	Frees func(o shed.Outcome) bool
	// Status is the status the layer's rejections carry
	// (shed.StatusTooManyRequests or shed.StatusServiceUnavailable).
	// Required.
	Status int
	// NoRetryAfter says the layer's rejections carry no RetryAfter; by
	// default the suite wants one.
	NoRetryAfter bool
	// NoPolicy says the layer's rejections name no policy; by default the
	// suite wants at least one, with a name and a positive limit.
	NoPolicy bool
	// Goroutines and Iterations size the concurrent test (defaults 8 and
	// 200).
	Goroutines, Iterations int
}

// SoftOverageFor is the Enforcement.OverageFor of LayerSuite.NewSoft's
// layers.
const SoftOverageFor = time.Minute

// suiteStart is the manual clock's reading when a test begins.
var suiteStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var outcomes = [...]shed.Outcome{shed.Completed, shed.Failed, shed.Dropped, shed.Unused}

// RunLayerSuite runs the conformance tests every shed.Layer must pass, as
// subtests of t:
//
//   - Rejection: past its capacity the layer answers with a
//     *shed.Rejection of the declared status, naming the layer (Layer, as
//     Name says), with a RetryAfter and the violated policy, a new value on
//     every call (the chain writes into it);
//   - ReleaseOnce: for every outcome, releasing a lease frees what Frees
//     says, and releasing it again, or releasing a copy of it, changes
//     nothing; the zero Lease releases harmlessly;
//   - Chain: through a shed.Chain, the observer sees the layer's admitted,
//     rejected and released events with its name, the priority, the route
//     and the policy, and a later layer's rejection releases this layer's
//     lease Unused;
//   - Concurrent: goroutines acquire and release (copies too) at once, for
//     -race, and leave the layer as they found it;
//   - QueueCancel and QueueDeadline (with NewQueued): a request that gives
//     up while queued, or whose deadline passes, returns an error and holds
//     nothing;
//   - QueueEvict (with NewQueued): when the queue is full, a newcomer of
//     higher priority evicts the lowest waiter that would be served last
//     (with a rejection of the layer's status), and one of the same
//     priority is rejected at once;
//   - SoftEpisode (with NewSoft): past its capacity the layer admits
//     requests over the limit (Lease.Over) for one episode of
//     SoftOverageFor; under sustained overload, dipping under the limit
//     between requests, it then holds its hard limit and begins no new
//     episode; after a quiet cool-down, it begins one.
func RunLayerSuite(t *testing.T, s LayerSuite) {
	t.Helper()
	if s.New == nil || s.Capacity < 1 {
		t.Fatal("shedtest: LayerSuite needs New and a Capacity of at least 1")
	}
	if s.Status != shed.StatusTooManyRequests && s.Status != shed.StatusServiceUnavailable {
		t.Fatalf("shedtest: LayerSuite.Status is %d, want 429 or 503", s.Status)
	}
	if s.Request == (shed.Request{}) {
		s.Request = shed.Request{Key: "shedtest", Route: "GET /shedtest"}
	}
	if !s.Request.Priority.Valid() {
		s.Request.Priority = shed.Default
	}
	if s.Frees == nil {
		s.Frees = func(shed.Outcome) bool { return true }
	}
	if s.Goroutines <= 0 {
		s.Goroutines = 8
	}
	if s.Iterations <= 0 {
		s.Iterations = 200
	}
	t.Run("Rejection", s.testRejection)
	t.Run("ReleaseOnce", s.testReleaseOnce)
	t.Run("Chain", s.testChain)
	t.Run("Concurrent", s.testConcurrent)
	if s.NewQueued != nil {
		t.Run("QueueCancel", s.testQueueCancel)
		t.Run("QueueDeadline", s.testQueueDeadline)
		t.Run("QueueEvict", s.testQueueEvict)
	}
	if s.NewSoft != nil {
		t.Run("SoftEpisode", s.testSoftEpisode)
	}
}

// held keeps the leases a test took, and releases what is left at the end.
type held struct{ leases []shed.Lease }

func (h *held) releaseAll() {
	for i := range h.leases {
		h.leases[i].Release(shed.Completed)
	}
	h.leases = nil
}

// probe is the request the suite counts admissions with: its deadline has
// passed, so that a queueing layer answers at once instead of waiting.
func (s *LayerSuite) probe(clock *Clock) shed.Request {
	req := s.Request
	req.Deadline = clock.Now()
	return req
}

// admits counts how many more probes l admits now (at most limit), keeping
// their leases in h.
func (s *LayerSuite) admits(t testing.TB, l shed.Layer, clock *Clock, h *held, limit int) int {
	t.Helper()
	n := 0
	for n < limit {
		lease, err := l.Acquire(context.Background(), s.probe(clock))
		if err != nil {
			var rej *shed.Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("probe %d: %v; want a lease or a *shed.Rejection", n, err)
			}
			return n
		}
		h.leases = append(h.leases, lease)
		n++
	}
	return n
}

// fill takes the fresh layer's whole capacity into h.
func (s *LayerSuite) fill(t testing.TB, l shed.Layer, clock *Clock, h *held) {
	t.Helper()
	if n := s.admits(t, l, clock, h, s.Capacity+1); n != s.Capacity {
		t.Fatalf("a fresh layer admitted %d requests before rejecting; LayerSuite.Capacity says %d", n, s.Capacity)
	}
}

func (s *LayerSuite) fresh(t *testing.T) (shed.Layer, *Clock, *held) {
	return build(t, "New", s.New)
}

// build makes a fresh layer with newLayer (the LayerSuite field named
// field) on a clock of its own.
func build(t *testing.T, field string, newLayer func(testing.TB, *Clock) shed.Layer) (shed.Layer, *Clock, *held) {
	clock := NewClock(suiteStart)
	l := newLayer(t, clock)
	if l == nil {
		t.Fatalf("LayerSuite.%s returned nil", field)
	}
	h := &held{}
	t.Cleanup(h.releaseAll)
	return l, clock, h
}

func (s *LayerSuite) testRejection(t *testing.T) {
	l, clock, h := s.fresh(t)
	s.fill(t, l, clock, h)
	var first *shed.Rejection
	for i := 0; i < 2; i++ {
		_, err := l.Acquire(context.Background(), s.probe(clock))
		rej := Rejection(t, err)
		if !errors.Is(err, shed.ErrRejected) {
			t.Errorf("errors.Is(%v, shed.ErrRejected) is false", err)
		}
		if rej.Status != s.Status {
			t.Errorf("rejection status %d, want %d", rej.Status, s.Status)
		}
		if !s.NoRetryAfter && rej.RetryAfter <= 0 {
			t.Errorf("rejection has RetryAfter %v; want a positive hint", rej.RetryAfter)
		}
		if !s.NoPolicy {
			if len(rej.Policies) == 0 {
				t.Errorf("rejection names no policy: %+v", rej)
			}
			for _, q := range rej.Policies {
				if q.Policy == "" || q.Limit <= 0 {
					t.Errorf("violated policy %+v: want a name and a positive limit", q)
				}
			}
		}
		if rej.Reason == "" {
			t.Error("rejection has no Reason")
		}
		if rej.Layer != l.Name() {
			t.Errorf("rejection of a layer called directly names layer %q, want its own name %q (it reads %q)", rej.Layer, l.Name(), rej.Error())
		}
		if first == nil {
			first = rej
		} else if first == rej {
			t.Error("two rejections are the same *shed.Rejection; the chain writes into it, so return a new one each time")
		}
	}
}

func (s *LayerSuite) testReleaseOnce(t *testing.T) {
	for _, o := range outcomes {
		t.Run(o.String(), func(t *testing.T) {
			want := 0
			if s.Frees(o) {
				want = 1
			}
			// Released once.
			l, clock, h := s.fresh(t)
			s.fill(t, l, clock, h)
			h.leases[0].Release(o)
			if got := s.admits(t, l, clock, h, s.Capacity); got != want {
				t.Fatalf("after one release %v the layer admits %d more, want %d", o, got, want)
			}
			// Released, released again, and through two copies: the same.
			l, clock, h = s.fresh(t)
			s.fill(t, l, clock, h)
			lease := h.leases[0]
			copied := lease
			h.leases[0].Release(o)
			h.leases[0].Release(o)
			lease.Release(o)
			copied.Release(shed.Unused)
			copied.Release(o)
			if got := s.admits(t, l, clock, h, s.Capacity); got != want {
				t.Fatalf("after a release %v, a second one and two copies' the layer admits %d more, want %d", o, got, want)
			}
			var zero shed.Lease
			zero.Release(o)
			if r, ok := l.(shed.Releaser); ok {
				r.Release(&shed.Lease{}, o)
				r.Release(&shed.Lease{Ref: "not a lease of this layer", ID: 1, Cost: 1}, o)
			}
			if got := s.admits(t, l, clock, h, 1); got != 0 {
				t.Fatalf("releasing the zero lease or a foreign one freed capacity")
			}
		})
	}
}

func (s *LayerSuite) testChain(t *testing.T) {
	l, clock, h := s.fresh(t)
	var mu sync.Mutex
	var events []shed.Event
	obs := shed.ObserverFunc(func(e shed.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	after := NewLayer("shedtest-after")
	c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l, after}, Observer: obs, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	name := l.Name()
	if name == "" {
		t.Error("the layer's Name is empty")
	}
	req := s.probe(clock)
	req.Priority = shed.Unset // the chain resolves it: layers never see Unset
	ctx := shed.WithPriority(context.Background(), shed.Critical)
	sawUnset := false
	after.OnAcquire = func(_ context.Context, r shed.Request) { sawUnset = sawUnset || r.Priority == shed.Unset }

	// A later layer's rejection releases this layer's lease Unused.
	after.Reject(shed.Shed("after says no", time.Second))
	if err := c.Do(ctx, req, func(context.Context) error { return nil }); !errors.Is(err, shed.ErrRejected) {
		t.Fatalf("Do through a rejecting second layer = %v", err)
	}
	after.Admit()
	want := s.Capacity - 1
	if s.Frees(shed.Unused) {
		want = s.Capacity
	}
	if got := s.admits(t, l, clock, h, s.Capacity+1); got != want {
		t.Fatalf("after a lease released Unused by the chain the layer admits %d, want %d", got, want)
	}
	// Full now: the chain rejects with the layer's name and the priority.
	err = c.Do(ctx, req, func(context.Context) error { return nil })
	rej := Rejection(t, err)
	if rej.Layer != name || rej.Priority != shed.Critical || rej.Status != s.Status {
		t.Errorf("rejection through the chain: layer %q, priority %v, status %d; want %q, critical, %d",
			rej.Layer, rej.Priority, rej.Status, name, s.Status)
	}
	h.releaseAll()
	if !s.Frees(shed.Completed) {
		// A rate limit's capacity comes back only with time: start afresh.
		l, clock, _ = s.fresh(t)
		c, err = shed.NewChain(shed.Config{Layers: []shed.Layer{l, after}, Observer: obs, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, req, func(context.Context) error { return errors.New("work failed") }); err == nil {
		t.Fatal("Do did not return the work's error")
	}
	if sawUnset {
		t.Error("a layer saw shed.Unset through the chain")
	}
	mu.Lock()
	defer mu.Unlock()
	var admitted, rejected, released int
	for _, e := range events {
		if e.Layer != name {
			continue
		}
		if e.Priority != shed.Critical || e.Route != s.Request.Route {
			t.Errorf("event %+v: want priority critical and route %q", e, s.Request.Route)
		}
		switch e.Kind {
		case shed.Admitted, shed.WouldReject:
			admitted++
		case shed.Rejected:
			rejected++
			if e.Status != s.Status || (!s.NoPolicy && e.Policy == "") {
				t.Errorf("rejected event %+v: want status %d and the policy", e, s.Status)
			}
		case shed.Released:
			released++
		}
	}
	if admitted != 2 || rejected != 1 || released != 2 {
		t.Errorf("events of %q: %d admitted, %d rejected, %d released; want 2, 1, 2:\n%+v", name, admitted, rejected, released, events)
	}
	var outs []shed.Outcome
	for _, e := range events {
		if e.Layer == name && e.Kind == shed.Released {
			outs = append(outs, e.Outcome)
		}
	}
	if len(outs) == 2 && (outs[0] != shed.Unused || outs[1] != shed.Failed) {
		t.Errorf("release outcomes %v, want [unused failed]", outs)
	}
}

func (s *LayerSuite) testConcurrent(t *testing.T) {
	l, clock, h := s.fresh(t)
	var frees []shed.Outcome
	for _, o := range outcomes {
		if s.Frees(o) {
			frees = append(frees, o)
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < s.Goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < s.Iterations; i++ {
				lease, err := l.Acquire(context.Background(), s.probe(clock))
				if err != nil {
					var rej *shed.Rejection
					if !errors.As(err, &rej) {
						t.Errorf("Acquire: %v", err)
						return
					}
					runtime.Gosched()
					continue
				}
				o := outcomes[(g+i)%len(outcomes)]
				if len(frees) > 0 {
					o = frees[(g+i)%len(frees)]
				}
				copied := lease
				if i%2 == 0 {
					lease.Release(o)
					copied.Release(o)
				} else {
					copied.Release(o)
					lease.Release(o)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() || len(frees) == 0 {
		return
	}
	// Every lease was released with an outcome that frees: the layer is
	// back where it started.
	s.fill(t, l, clock, h)
}

// waitQueued waits, in real time but bounded, until l reports n waiters.
func waitQueued(t testing.TB, l shed.Layer, n int) {
	t.Helper()
	q, ok := l.(interface{ Queued() int })
	if !ok {
		t.Fatalf("%T has no Queued() int method: the queue tests cannot see its waiters", l)
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.Queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Queued() = %d after 10s, want %d", q.Queued(), n)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func (s *LayerSuite) freshQueued(t *testing.T) (shed.Layer, *Clock, *held) {
	l, clock, h := build(t, "NewQueued", s.NewQueued)
	s.fill(t, l, clock, h)
	return l, clock, h
}

// queued starts an Acquire that will queue, and returns its answer's channel.
func (s *LayerSuite) queued(ctx context.Context, l shed.Layer, req shed.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, req)
		if err == nil {
			lease.Release(shed.Unused)
			err = fmt.Errorf("a queued request was granted a lease")
		}
		done <- err
	}()
	return done
}

func (s *LayerSuite) testQueueCancel(t *testing.T) {
	l, clock, h := s.freshQueued(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := s.queued(ctx, l, s.Request)
	waitQueued(t, l, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a queued request whose context ended got %v; want context.Canceled", err)
	}
	waitQueued(t, l, 0)
	s.checkNothingHeld(t, l, clock, h)
}

func (s *LayerSuite) testQueueDeadline(t *testing.T) {
	l, clock, h := s.freshQueued(t)
	req := s.Request
	req.Deadline = clock.Now().Add(time.Second)
	done := s.queued(context.Background(), l, req)
	waitQueued(t, l, 1)
	clock.Advance(2 * time.Second)
	err := <-done
	rej := Rejection(t, err)
	if rej.Status != s.Status || rej.Waited <= 0 {
		t.Fatalf("a queued request past its deadline: %+v; want status %d and the time it waited", rej, s.Status)
	}
	waitQueued(t, l, 0)
	s.checkNothingHeld(t, l, clock, h)
}

// checkNothingHeld checks that a request that left the queue took
// nothing: freeing one of the held leases frees exactly one unit.
func (s *LayerSuite) checkNothingHeld(t *testing.T, l shed.Layer, clock *Clock, h *held) {
	t.Helper()
	o := shed.Completed
	if !s.Frees(o) {
		o = shed.Unused
	}
	if !s.Frees(o) {
		return
	}
	h.leases[0].Release(o)
	if got := s.admits(t, l, clock, h, s.Capacity); got != 1 {
		t.Fatalf("after the waiter left and one lease was released, the layer admits %d, want 1", got)
	}
}

// answered waits, in real time but bounded, until l reports n waiters (and
// returns false) or done has an answer (and returns it, and true).
func answered(t testing.TB, l shed.Layer, n int, done <-chan error) (error, bool) {
	t.Helper()
	q, ok := l.(interface{ Queued() int })
	if !ok {
		t.Fatalf("%T has no Queued() int method: the queue tests cannot see its waiters", l)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			return err, true
		default:
		}
		if q.Queued() == n {
			return nil, false
		}
		if time.Now().After(deadline) {
			t.Fatalf("Queued() = %d after 10s, want %d", q.Queued(), n)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func (s *LayerSuite) testQueueEvict(t *testing.T) {
	l, clock, h := s.freshQueued(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	low, high := s.Request, s.Request
	low.Priority, high.Priority = shed.Sheddable, shed.Critical
	// Sheddable waiters, until the queue is full.
	var waiting []<-chan error
	for {
		if len(waiting) == 64 {
			t.Fatal("the queue took 64 waiters without filling up")
		}
		done := s.queued(ctx, l, low)
		if err, full := answered(t, l, len(waiting)+1, done); full {
			if rej := Rejection(t, err); rej.Status != s.Status {
				t.Fatalf("a newcomer to a full queue: %+v; want status %d", rej, s.Status)
			}
			break
		}
		waiting = append(waiting, done)
	}
	n := len(waiting)
	if n == 0 {
		t.Fatal("NewQueued's queue holds no waiter")
	}
	// A critical newcomer takes the place of the newest sheddable waiter.
	critical := s.queued(ctx, l, high)
	select {
	case err := <-waiting[n-1]:
		if rej := Rejection(t, err); rej.Status != s.Status || !errors.Is(err, shed.ErrRejected) {
			t.Fatalf("the evicted waiter got %+v; want a rejection with status %d", rej, s.Status)
		}
	case err := <-critical:
		t.Fatalf("a critical newcomer to a full queue of sheddable waiters got %v; want one of them evicted", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a critical newcomer to a full queue of sheddable waiters evicted none of them (10s)")
	}
	waitQueued(t, l, n)
	cancel()
	for i, done := range append(waiting[:n-1], critical) {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d, cancelled: %v; want context.Canceled", i, err)
		}
	}
	waitQueued(t, l, 0)
	s.checkNothingHeld(t, l, clock, h)
}

func (s *LayerSuite) testSoftEpisode(t *testing.T) {
	free := shed.Outcome(0)
	frees := false
	for _, o := range outcomes {
		if s.Frees(o) {
			free, frees = o, true
			break
		}
	}
	if !frees {
		t.Skip("no outcome frees a unit: the soft-mode test cannot hold the layer at its limit")
	}
	l, clock, h := build(t, "NewSoft", s.NewSoft)
	if n := s.admits(t, l, clock, h, s.Capacity); n != s.Capacity {
		t.Fatalf("a fresh soft layer admitted %d requests; LayerSuite.Capacity says %d", n, s.Capacity)
	}
	for i, lease := range h.leases {
		if lease.Over {
			t.Fatalf("request %d, within Capacity, admitted with Lease.Over", i)
		}
	}
	at := func(d time.Duration) { clock.Set(suiteStart.Add(d)) }
	// over sends a request over the limit and reports whether it was
	// admitted (over the limit, or the test fails), releasing it at once.
	over := func(d time.Duration) bool {
		t.Helper()
		lease, err := l.Acquire(context.Background(), s.probe(clock))
		if err != nil {
			if rej := Rejection(t, err); rej.Status != s.Status {
				t.Fatalf("+%v: rejection %+v; want status %d", d, rej, s.Status)
			}
			return false
		}
		defer lease.Release(free)
		if !lease.Over {
			t.Fatalf("+%v: admitted past Capacity without Lease.Over", d)
		}
		return true
	}
	const step = SoftOverageFor / 6
	for d := time.Duration(0); d <= SoftOverageFor; d += step {
		at(d)
		if !over(d) {
			t.Fatalf("+%v into the episode (OverageFor %v): rejected; want admitted over the limit", d, SoftOverageFor)
		}
	}
	// Sustained overload: between requests over the limit, the layer dips
	// under it (one unit freed and taken again within the limit). That
	// must not begin a new episode.
	for d := SoftOverageFor + step; d <= 4*SoftOverageFor; d += step {
		at(d)
		h.leases[0].Release(free)
		lease, err := l.Acquire(context.Background(), s.probe(clock))
		if err != nil || lease.Over {
			t.Fatalf("+%v: a unit freed, then %v (over %v); want admitted within the limit", d, err, lease.Over)
		}
		h.leases[0] = lease
		if over(d) {
			t.Fatalf("+%v: admitted over the limit %v after the episode began, under sustained overload", d, d)
		}
	}
	// Quiet for a cool-down (by default OverageFor) and more: a new one.
	d := 6 * SoftOverageFor
	at(d)
	if !over(d) {
		t.Fatalf("+%v: rejected after a quiet cool-down; want a new episode", d)
	}
}
