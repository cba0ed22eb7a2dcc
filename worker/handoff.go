package worker

import (
	"runtime"
	"sync"
	"time"
)

// Capacity a release frees is handed to the queue through the network
// poller while the CPU reads saturated, not at once in the releaser's goroutine.
//
// A Go process learns that a request's bytes arrived only when it asks the
// network poller: a P that has run out of runnable goroutines asks, and the
// runtime's monitor thread asks when nobody has for 10ms. Granted at once,
// the queued request's goroutine is made runnable at once too, so while
// admitted work keeps every P busy (a CPU-bound service under overload)
// no P ever runs out: the requests that arrive, critical ones among them,
// are read only at the monitor's polls, every 10ms, and the capacity freed
// in between goes to whatever waited before they came. On a server with
// GOMAXPROCS=1 and one goroutine burning the CPU, a request that costs
// nothing is answered in 6.9ms (median) instead of 0.19ms
// (bench/cmd/pollprobe).
//
// A release that finds requests queued writes a byte to a pipe the poller
// watches instead, and the goroutine that reads it (in two steps, below)
// grants the capacity.
// That goroutine becomes runnable only when the poller is asked, which
// happens as soon as the P runs out of the goroutines runnable before it
// (so no CPU idles while a request waits), and that same poll returns the
// requests that arrived meanwhile: they are read, decided and queued
// first, and the capacity goes to the most important of them (or, among
// equals, to the client furthest behind its share: layerkit's fair
// queue). Until then no waiter takes capacity: a waiter timing out
// dispatches its queue from its timer's goroutine, which runs before the
// P runs dry, and handed the capacity out before the poll (a runtime
// trace of the one-CPU server at 2x: the poller was asked every 2.2ms at
// the median, as the handlers end, but only every 5.8ms at p90 and 8.3ms
// at p99, three or four handlers running back to back; with the gate,
// every 2.1-2.3ms). On the demonstration's one-CPU server
// (docs/overload.md), with LimitConfig.Min at one per CPU, critical p99
// went from 3.2-4.0x the floor's at 2x and 5x to 1.12-1.37x (2.06-2.24x
// before the gate), and the p99 of all admitted at 5x from 3.7x to
// 1.24-1.26x. With the CPU idle the poll is not late, and releases grant
// at once.
//
// The hand-off takes two polls (handoffs.start). The poll that returns
// the release puts the requests it read on the P's own run queue, and a
// goroutine that yields goes to the global run queue, which a busy P
// looks at only every 61st schedule: a refused request takes about three
// (its connection's goroutine, net/http's background read, the
// connection again), so on a flood the hand-off ran after about twenty
// of them whatever the poll had returned. A runtime trace of the
// demonstration's tenant-cpu server at 50x (one CPU, 10ms handlers, about
// 60 requests read by each poll): 8 of 21 light clients' requests were
// read after a flood's request was granted the capacity that freed while
// they waited to be read, and each then waited for it too. So the
// goroutine the release wakes writes to a second pipe, and the one that
// reads that grants: the second poll comes once the P has run everything
// the first readied (1 of 23 in a trace of the same step; that one was
// read by a poll of the runtime's monitor, whose goroutines join the
// global queue).
//
// Two guards keep a hand-off from leaving capacity idle: the queues wait
// for one for at most handoffGrace, and releases grant at once while the
// scheduler is backlogged (handoffBacklog), where a hand-off would wait
// for the P to run everything runnable.
//
// Only while saturated: releases hand off only while the CPU (or the
// scheduler) reads saturated, not from half of that as admissions yield.
// On a CPU half busy in bursts the poll waits for a burst to end, and a
// hand-off with it. On the demonstration's mixed service (each request
// holds one of 16 connections for 30ms, then burns 2ms of the one CPU,
// which reads about half busy), hand-offs waited 33ms from release to
// poll (mean, 3 to 5 every quarter second; 36ms at most) against about
// 2ms on the CPU-bound server, and releases meanwhile granted nothing: in
// flight fell to 1-6 under a limit of 16 with 15-20 waiting. The requests
// a hand-off admits together call the downstream together and burn the
// CPU back to back 30ms later, so the next hand-off waits for that burst
// too. Five runs of 2x and 5x each, interleaved: goodput 91.8% of
// capacity on average (85.0-96.6%) with hand-offs from half the CPU,
// 95.5% (90.4-97.0%) only while saturated, and 92.3% in eight later runs
// of the latter; within the runs' spread, so kept for the idle capacity
// it removes, measured directly.
//
// Two pipes and their two goroutines serve every Layer of the process. Where
// pipes are not pollable (handoffPipe returns nil), releases grant at once.

// handoffGrace is how long the queues leave released capacity to a
// hand-off on its way (Layer.awaitingHandoff): the poll that runs it
// comes as soon as the P has run what was runnable, within a handler's
// time on a busy CPU (every 2.1-2.3ms on the demonstration's server).
//
// It is counted from the release that posted the hand-off, and again from
// a later release that finds it overdue. Under a flood the P may never
// run dry, and the runtime's monitor then does the polling, every 10ms,
// putting what it reads (the hand-off's goroutine among the requests) on
// the global run queue, where it can wait behind a whole handler: the
// hand-off is then still on its way when the next release comes. Counted
// from the first release only, the grace was spent by then, and the
// capacity went to whatever waited when the next request arrived, before
// the requests read meanwhile had reached the queue. A runtime trace of
// the demonstration's tenant-cpu server at 50x: a light client's request
// and the hand-off's goroutine, read by the same poll of the monitor, ran
// 25ms after the request was sent and 2ms after a release; a flood's
// request that arrived in between took that release's capacity for one of
// the flood's waiters, and the light request was answered 57ms after it
// was sent (the floor's p99: 22ms). With a grace per release, in 16 runs
// of that step interleaved with 16 before it, the light clients' p99 was
// 1.07-1.85 times the floor's (median 1.40) against 1.00-2.10 (median
// 1.59), over 1.5 in 4 runs against 10 (six later runs with it: 1.17-1.84,
// three over 1.5), and goodput 91.4-100% of the bound against 95.7-100%.
// Each release's capacity still waits for a hand-off at most handoffGrace.
const handoffGrace = 5 * time.Millisecond

// handoffBacklog is the scheduler latency, in multiples of its target,
// from which releases grant at once (Layer.handOff): the P then takes that
// long to run what is runnable, and a hand-off would wait as long. On the
// demonstration's one-CPU server a flood at 2x and 5x reads up to about
// 4; a jammed one, 28.
const handoffBacklog = 8

// handoff is the process's hand-off of freed capacity.
var handoff handoffs

type handoffs struct {
	once sync.Once
	// pipe opens a pipe the poller watches (nil: handoffPipe; tests
	// replace it).
	pipe    func() (wait, wake func() error, release func())
	wake    func() error // writes a byte to the pipe; nil: no pipe
	mu      sync.Mutex
	pending []*Layer
}

// post asks that l's queues be granted the capacity released, through the
// poller. It reports false when that cannot be done: the caller grants at
// once.
func (h *handoffs) post(l *Layer) bool {
	h.once.Do(h.start)
	if h.wake == nil {
		return false
	}
	now := monoNanos()
	if l.handoffPending.Swap(true) {
		// A hand-off is on its way already; it will see this release. If
		// it is overdue, this release's capacity still waits for it for a
		// grace of its own (see handoffGrace).
		if l.handoffOverdue(now) {
			l.handoffPosted.Store(now)
		}
		return true
	}
	l.handoffPosted.Store(now)
	h.mu.Lock()
	first := len(h.pending) == 0
	h.pending = append(h.pending, l)
	h.mu.Unlock()
	if first && h.wake() != nil {
		// The pipe failed (it should not): hand over here, as without it.
		h.run()
	}
	return true
}

func (h *handoffs) start() {
	if h.pipe == nil {
		h.pipe = handoffPipe
	}
	wait, wake, release := h.pipe()
	if wait == nil {
		return
	}
	waitDrained, drained, _ := h.pipe()
	if waitDrained == nil {
		// Without the second pipe releases grant at once, as without the
		// first: its descriptors are not kept for nothing.
		release()
		return
	}
	h.wake = wake
	go func() {
		for wait() == nil {
			// The poll that returned the release returned the requests
			// read meanwhile too: hand over at the next poll, which comes
			// once the P has run them all (see above).
			if drained() != nil {
				h.run()
			}
		}
		h.run()
	}()
	go func() {
		for waitDrained() == nil {
			// Let the goroutines readied by the same poll (requests
			// that arrived while the first ones ran) reach their queue
			// first.
			runtime.Gosched()
			h.run()
		}
	}()
}

// run grants every pending layer's queues.
func (h *handoffs) run() {
	h.mu.Lock()
	ls := h.pending
	h.pending = nil
	h.mu.Unlock()
	for i, l := range ls {
		l.handoffPending.Store(false)
		l.notify()
		ls[i] = nil
	}
	h.mu.Lock()
	if h.pending == nil {
		h.pending = ls[:0] // reuse the array: no allocation per hand-off
	}
	h.mu.Unlock()
}
