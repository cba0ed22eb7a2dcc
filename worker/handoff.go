package worker

import (
	"runtime"
	"sync"
)

// Capacity a release frees is handed to the queue through the network
// poller while the CPU reads busy, not at once in the releaser's goroutine.
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
// watches instead, and the goroutine that reads it grants the capacity.
// That goroutine becomes runnable only when the poller is asked, which
// happens as soon as the P runs out of the goroutines runnable before it
// (so no CPU idles while a request waits), and that same poll returns the
// requests that arrived meanwhile: they are read, decided and queued
// first (the goroutine yields once so that they run before it), and the
// capacity goes to the most important of them. A request that reaches the
// queue first grants it itself (WaitQueue.Wait dispatches). On the
// demonstration's one-CPU server (docs/overload.md), with LimitConfig.Min
// at one per CPU, critical p99 went from 3.2-4.0x the floor's at 2x and
// 5x to 2.06-2.24x. With the CPU idle the poll is not late, and releases
// grant at once.
//
// One pipe and one goroutine serve every Layer of the process. Where
// pipes are not pollable (handoffPipe returns nil), releases grant at once.

// handoff is the process's hand-off of freed capacity.
var handoff handoffs

type handoffs struct {
	once    sync.Once
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
	if l.handoffPending.Swap(true) {
		return true // a hand-off is on its way already; it will see this release
	}
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
	wait, wake := handoffPipe()
	if wait == nil {
		return
	}
	h.wake = wake
	go func() {
		for wait() == nil {
			// Let the goroutines readied by the same poll (requests just
			// read) reach their queue first.
			runtime.Gosched()
			h.run()
		}
		h.run()
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
