package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
)

// queues holds one layerkit.WaitQueue per key with requests waiting, so that a
// key over its limit never holds up another key's waiters; priority orders
// the waiters of one key. Enforcement.Queue.MaxLength bounds the waiters of
// the whole layer, not of each key: evict makes room across keys.
type queues struct {
	cfg     shed.QueueConfig
	maxKeys int
	waiting atomic.Int64
	// trying counts the waiters' tries under way, so that tests can wait
	// for a queue at rest before they move the clock.
	trying atomic.Int64

	mu sync.Mutex
	m  map[string]*keyQueue
}

type keyQueue struct {
	q     *layerkit.WaitQueue
	users int
}

func (qs *queues) enter(key string) (*keyQueue, error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	kq := qs.m[key]
	if kq == nil {
		if len(qs.m) >= qs.maxKeys {
			return nil, layerkit.ErrQueueFull
		}
		q, err := layerkit.NewWaitQueue(qs.cfg)
		if err != nil {
			return nil, err
		}
		kq = &keyQueue{q: q}
		qs.m[key] = kq
	}
	kq.users++
	return kq, nil
}

func (qs *queues) leave(key string, kq *keyQueue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if kq.users--; kq.users == 0 {
		delete(qs.m, key)
	}
}

// notify wakes key's waiters, if any: units were refunded.
func (qs *queues) notify(key string) {
	if qs.waiting.Load() == 0 {
		return
	}
	qs.mu.Lock()
	kq := qs.m[key]
	qs.mu.Unlock()
	if kq != nil {
		kq.q.Notify()
	}
}

// sleeper wakes a queue when a waiter's RetryAfter has passed: a rate
// limiter's capacity comes back with time, not only with releases.
type sleeper struct {
	mu    sync.Mutex
	retry time.Duration
	at    time.Time // when retry was computed
	done  bool
	timer shed.Timer
}

func (s *sleeper) arm(clock shed.Clock, q *layerkit.WaitQueue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	d := s.retry
	if d <= 0 {
		d = time.Millisecond
	}
	s.timer = clock.AfterFunc(d, func() {
		q.Notify()
		s.arm(clock, q)
	})
}

func (s *sleeper) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

// wait queues a request over its limit until every rule admits it, the
// queue's bounds or its deadline pass, or ctx ends. It returns the attempt
// that succeeded (its ticket holds the units taken) and its verdict. It
// takes its arguments by value so that only a request that queues moves
// them to the heap.
func (l *Layer) wait(ctx context.Context, request shed.Request, first attempt) (attempt, layerkit.Verdict, time.Duration, error) {
	qs := l.queues
	key := first.overKey
	req, a := &request, new(attempt)
	*a = first
	v := layerkit.Wait
	fail := func(err error, waited time.Duration) (attempt, layerkit.Verdict, time.Duration, error) {
		return first, v, waited, l.queueRejection(req, &first, err, waited)
	}
	if qs.waiting.Add(1) > int64(qs.cfg.MaxLength) && !qs.evict(req.Priority) {
		qs.waiting.Add(-1)
		return fail(layerkit.ErrQueueFull, 0)
	}
	defer qs.waiting.Add(-1)
	kq, err := qs.enter(key)
	if err != nil {
		return fail(err, 0)
	}
	defer qs.leave(key, kq)

	s := &sleeper{retry: a.retry, at: l.clock.Now()}
	take := func() bool {
		qs.trying.Add(1)
		defer qs.trying.Add(-1)
		if ctx.Err() != nil {
			// The caller has gone: deciding for it would ask the limiters
			// with a dead context (a Redis store would fall back and admit)
			// only to refund at once.
			return false
		}
		// The time of the try is read before the stores answer, never after:
		// a later reading would make their RetryAfter look fresher than it
		// is (at most by the stores' own latency this way round).
		at := l.clock.Now()
		l.try(ctx, req, a)
		switch v = l.verdict(a); v {
		case layerkit.Admit, layerkit.AdmitOver:
			return true
		}
		l.refund(a.t, false)
		s.mu.Lock()
		s.retry, s.at = a.retry, at
		first.retry, first.denied = a.retry, a.denied
		s.mu.Unlock()
		return false
	}
	s.arm(l.clock, kq.q)
	waited, err := kq.q.Wait(ctx, req.Priority, req.Deadline, take, func() { l.refund(a.t, false) })
	s.stop()
	if err != nil {
		// Retry-After as of now, not as of the last attempt: the time
		// spent since then counts.
		s.mu.Lock()
		gone := l.clock.Now().Sub(s.at)
		s.mu.Unlock()
		first.retry = max(0, first.retry-gone)
		first.denied.Reset = max(0, first.denied.Reset-gone)
		return fail(err, waited)
	}
	return *a, v, waited, nil
}

// evict makes room in the full queues for a newcomer of priority p: the
// lowest-priority waiter below p, across every key, is evicted, as the
// concurrency layer's single queue does. It reports whether one was.
func (qs *queues) evict(p shed.Priority) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	var victim *keyQueue
	lowest := p
	for _, kq := range qs.m {
		if lp, ok := kq.q.Lowest(); ok && lp < lowest {
			victim, lowest = kq, lp
		}
	}
	return victim != nil && victim.q.Evict(p)
}

func (l *Layer) queueRejection(req *shed.Request, a *attempt, err error, waited time.Duration) error {
	err = layerkit.QueueRejection(shed.StatusTooManyRequests, err, waited)
	var rj *shed.Rejection
	if errors.As(err, &rj) {
		rj.Layer, rj.RetryAfter = l.name, a.retry
		rj.Policies = []shed.Quota{a.denied}
		rj.Fallback = a.fallback
	}
	return err
}
