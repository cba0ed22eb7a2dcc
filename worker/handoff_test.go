package worker

import (
	"context"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// A request that arrives between a release and the hand-off of the freed
// capacity competes for it by priority: on a busy P the requests read by
// the poll that runs the hand-off are decided first. Granted at once in
// the releaser (as before), the capacity went to the sheddable request
// already waiting and the critical one waited behind it.
func TestReleaseHandsOffAfterTheRequestsReadMeanwhile(t *testing.T) {
	l, ctx, held := handOffOnOneP(t)
	sheddable := queued(t, l, ctx, "the sheddable request", shed.Request{Priority: shed.Sheddable}, 1)

	held.Release(shed.Completed)
	critical, err := l.Acquire(ctx, shed.Request{Priority: shed.Critical})
	if err != nil {
		t.Fatalf("the critical request that came after the release: %v", err)
	}
	if n := l.Queued(); n != 1 {
		t.Fatalf("%d waiting once the critical request was admitted, want the sheddable one still waiting", n)
	}
	critical.Release(shed.Completed)
	if err := <-sheddable; err != nil {
		t.Fatalf("the sheddable request, once the critical one was done: %v", err)
	}
}

// The poll that runs a hand-off returns the requests read meanwhile too,
// and on a flood they are many: the capacity goes out only once every one
// of them has run, not at the 61st schedule, when the P first looks at
// the global run queue (where a goroutine that yields waits). Here 128
// readers parked in the poller, as connections are, are readied by the
// poll that returns the release.
func TestHandOffWaitsForEveryRequestReadByItsPoll(t *testing.T) {
	l, ctx, held := handOffOnOneP(t)
	l.handoffGrace = time.Hour // however slow this machine is
	granted := make(chan int64, 1)
	var ran atomic.Int64
	go func() {
		ls, err := l.Acquire(ctx, shed.Request{Priority: shed.Sheddable})
		if err != nil {
			t.Errorf("the waiting request: %v", err)
			granted <- -1
			return
		}
		granted <- ran.Load() // before this goroutine yields to anyone else
		ls.Release(shed.Completed)
	}()
	waitUntil(t, "the request to queue", func() bool { return l.Queued() == 1 })

	const readers = 128
	var writers []*os.File
	for range readers {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		writers = append(writers, w)
		go func() {
			var b [1]byte
			if _, err := r.Read(b[:]); err == nil {
				ran.Add(1)
			}
		}()
	}
	runtime.Gosched() // the readers park in the poller
	for _, w := range writers {
		if _, err := w.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	held.Release(shed.Completed)
	if n := <-granted; n != readers {
		t.Fatalf("the capacity was handed out when %d of the %d goroutines readied with the release had run, want all", n, readers)
	}
}

// A release with nobody arriving after it still hands the capacity to the
// waiters, through the poller.
func TestReleaseHandsOffWithNothingElseToRun(t *testing.T) {
	l, _, ctx, held := oneSlotHeld(t)
	l.handoffOn.Store(true)
	const waiters = 8
	var done [waiters]<-chan error
	for i := range done {
		done[i] = queued(t, l, ctx, "a sheddable request", shed.Request{Priority: shed.Sheddable}, i+1)
	}
	held.Release(shed.Completed)
	for i, d := range done {
		if err := <-d; err != nil {
			t.Fatalf("waiter %d: %v, want each served in turn", i, err)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Fatalf("%d in flight once every waiter was served and released, want 0", n)
	}
}

// While a hand-off is on its way, a waiter timing out (which dispatches
// its queue) does not hand the released capacity out before the poll: the
// hand-off does, to the most important request by then. Before, the next
// waiter got it from the timer, and the requests the poll returned waited
// for another release.
func TestNoGrantWhileAHandOffIsOnItsWay(t *testing.T) {
	l, clock, ctx, held := oneSlotHeld(t)
	timesOut := queued(t, l, ctx, "the one that times out", shed.Request{Priority: shed.Sheddable, Deadline: t0.Add(10 * time.Millisecond)}, 1)
	waits := queued(t, l, ctx, "the one that waits", shed.Request{Priority: shed.Sheddable}, 2)

	// A hand-off is on its way (set by hand, so that the process's
	// hand-off goroutine has nothing to do with this layer); the release
	// then frees the capacity without granting it.
	l.handoffGrace = time.Hour // however slow this machine is
	l.handoffPosted.Store(monoNanos())
	l.handoffPending.Store(true)
	held.Release(shed.Completed)
	clock.Advance(20 * time.Millisecond)
	if err := <-timesOut; err == nil {
		t.Fatal("the one with a deadline 10ms away was granted, want it timed out")
	}
	if n, in := l.Queued(), l.InFlight(); n != 1 || in != 0 {
		t.Fatalf("%d waiting and %d in flight after a waiter timed out during a hand-off, want 1 waiting and none in flight", n, in)
	}
	// The hand-off arrives.
	l.handoffPending.Store(false)
	l.notify()
	if err := <-waits; err != nil {
		t.Fatalf("the one that waits: %v, want granted by the hand-off", err)
	}
}

// A hand-off the runtime is slow to run does not keep the capacity idle:
// after handoffGrace the waiters take it as without one.
func TestAHandOffThatDoesNotComeIsNotWaitedFor(t *testing.T) {
	l, _, ctx, held := oneSlotHeld(t)
	got := queued(t, l, ctx, "the request", shed.Request{Priority: shed.Sheddable}, 1)
	// On its way and never run, on a busy CPU (so that the release leaves
	// the capacity to it); the release was an hour ago.
	l.handoffOn.Store(true)
	l.handoffPending.Store(true)
	held.Release(shed.Completed)
	l.handoffPosted.Store(monoNanos() - int64(time.Hour))
	l.notify() // what a waiter timing out, or a newcomer, does
	if err := <-got; err != nil {
		t.Fatalf("the waiting request, once the hand-off was overdue: %v", err)
	}
	l.handoffPending.Store(false)
}

// A release that finds the hand-off on its way overdue leaves its own
// capacity to it for a grace of its own: the hand-off, late because the
// P never ran dry, comes with the requests read meanwhile. Before, the
// capacity went to the waiter of the first newcomer's dispatch.
func TestAReleaseGivesAnOverdueHandOffAGraceOfItsOwn(t *testing.T) {
	needHandoffPipe(t)
	l, _, ctx, held := oneSlotHeld(t)
	got := queued(t, l, ctx, "the request", shed.Request{Priority: shed.Sheddable}, 1)
	l.handoffOn.Store(true)
	l.handoffGrace = time.Hour // however slow this machine is
	l.handoffPosted.Store(monoNanos() - 2*int64(time.Hour))
	l.handoffPending.Store(true)
	held.Release(shed.Completed)
	l.notify() // what a waiter timing out, or a newcomer, does
	if n, in := l.Queued(), l.InFlight(); n != 1 || in != 0 {
		t.Fatalf("%d waiting and %d in flight after a release found the hand-off overdue, want 1 waiting and none in flight until it comes", n, in)
	}
	// The hand-off arrives.
	l.handoffPending.Store(false)
	l.notify()
	if err := <-got; err != nil {
		t.Fatalf("the request: %v, want granted by the hand-off", err)
	}
}

// needHandoffPipe starts the process's hand-off, and skips the test where
// pipes are not pollable.
func needHandoffPipe(t *testing.T) {
	t.Helper()
	handoff.once.Do(handoff.start)
	if handoff.wake == nil {
		t.Skip("no pollable pipe here: releases grant at once")
	}
}

// handOffOnOneP starts the process's hand-off (the test is skipped where
// pipes are not pollable) and returns oneSlotHeld's layer with hand-offs
// on, as the sampler sets them on a busy CPU, on one P until the test
// ends: the hand-off's goroutine cannot run until the test's blocks, as
// on a one-CPU server busy with admitted work.
func handOffOnOneP(t *testing.T) (*Layer, context.Context, shed.Lease) {
	t.Helper()
	needHandoffPipe(t)
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	l, _, ctx, held := oneSlotHeld(t)
	l.handoffOn.Store(true)
	return l, ctx, held
}

// oneSlotHeld returns a layer whose learnt limit is one request in flight,
// on a manual clock, with that one slot held by a default request, and a
// context bounding the test's waits.
func oneSlotHeld(t *testing.T) (*Layer, *shedtest.Clock, context.Context, shed.Lease) {
	t.Helper()
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, Config{Limit: LimitConfig{Initial: 1, Min: 1, Max: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	held, err := l.Acquire(ctx, shed.Request{Priority: shed.Default})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock, ctx, held
}

// queued starts req's Acquire (released at once if granted), waits until
// it is the n-th request queued, and returns where its error will come.
func queued(t *testing.T, l *Layer, ctx context.Context, name string, req shed.Request, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctx, req)
		if err == nil {
			ls.Release(shed.Completed)
		}
		done <- err
	}()
	waitUntil(t, name+" to queue", func() bool { return l.Queued() == n })
	return done
}

// Releases hand capacity off only while the CPU reads saturated: at half
// of that, as on a service whose requests wait on a pool and then burn
// the CPU, the poll comes when a burst of work ends, and the capacity
// idled until then (handoff.go). Admissions yield from half already.
func TestHandOffOnlyWhileTheCPUReadsSaturated(t *testing.T) {
	var reading atomic.Uint64
	clock := shedtest.NewClock(t0)
	l := signalLayer(t, clock, Config{Smoothing: 1},
		Signal{Name: SignalCPU, Read: func() float64 { return math.Float64frombits(reading.Load()) }})
	for _, c := range []struct {
		cpu            float64
		yield, handOff bool
	}{
		{0.2, false, false},
		{busyAbove, true, false},
		{0.6, true, false},
		{cpuSaturated, true, true},
		{0.9, true, true},
		{0.3, false, false},
	} {
		reading.Store(math.Float64bits(c.cpu))
		clock.Advance(DefaultInterval)
		if got := l.busyCPU.Load(); got != c.yield {
			t.Errorf("CPU reading %v: admissions yield %v, want %v", c.cpu, got, c.yield)
		}
		if got := l.handoffOn.Load(); got != c.handOff {
			t.Errorf("CPU reading %v: releases hand off %v, want %v", c.cpu, got, c.handOff)
		}
	}
}

// Without its second pipe the hand-off is off, as without the first, and
// the first pipe is closed rather than kept for nothing.
func TestHandOffClosesItsFirstPipeWhenTheSecondFails(t *testing.T) {
	opened, released := 0, 0
	h := &handoffs{pipe: func() (wait, wake func() error, release func()) {
		opened++
		if opened > 1 {
			return nil, nil, nil
		}
		return func() error { return nil }, func() error { return nil }, func() { released++ }
	}}
	if h.post(&Layer{}) {
		t.Error("post reported a hand-off without the second pipe")
	}
	if opened != 2 || released != 1 {
		t.Errorf("opened %d pipes and closed %d, want 2 and 1", opened, released)
	}
	if h.wake != nil {
		t.Error("the hand-off kept the first pipe's wake")
	}
}
