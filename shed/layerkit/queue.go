package layerkit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
)

// Errors returned by WaitQueue.Wait; match them with errors.Is.
// QueueRejection turns them into a *shed.Rejection.
var (
	// ErrQueueFull: the queue held MaxLength waiters, none of lower priority
	// than the newcomer; or the waiter was refused while it waited, to make
	// room for a newcomer of its priority (see WaitRequest).
	ErrQueueFull = errors.New("shed: wait queue full")
	// ErrQueueTimeout: MaxWait or the request's deadline passed before
	// capacity freed.
	ErrQueueTimeout = errors.New("shed: wait queue timed out")
	// ErrEvicted: a request of higher priority arrived at a full queue and
	// took this waiter's place.
	ErrEvicted = errors.New("shed: evicted from wait queue by a higher-priority request")
)

// QueueRejection maps an error from WaitQueue.Wait to what a layer returns:
// nil for nil, a *shed.Rejection with the given status for ErrQueueFull,
// ErrQueueTimeout and ErrEvicted (Reason "queue full", "queue wait timed out"
// or "evicted by higher-priority request"; Waited set), and any other error
// (a context error: the caller went away) unchanged. Every layer calls it so
// that queue errors look the same whichever layer queued.
func QueueRejection(status int, err error, waited time.Duration) error {
	var reason string
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrQueueFull):
		reason = "queue full"
	case errors.Is(err, ErrQueueTimeout):
		reason = "queue wait timed out"
	case errors.Is(err, ErrEvicted):
		reason = "evicted by higher-priority request"
	default:
		return err
	}
	return &shed.Rejection{Status: status, Reason: reason, Waited: waited}
}

// WaitQueue holds requests waiting for a layer's capacity and hands freed
// capacity to them, highest priority first and FIFO within a priority (see
// shed.QueueConfig.AdaptiveLIFO). It is bounded in length and in wait, honours
// each request's context and deadline, and never lets a waiter that gave up
// keep capacity.
//
// The queue does not know what capacity is: each waiter brings a take
// function that tries to claim its share (typically an atomic
// compare-and-swap on the layer's counter), and the layer calls Notify
// whenever capacity may have freed. Use one queue per pool of capacity: a
// waiter whose take fails blocks those behind it (lower priority, or later
// at the same priority), which keeps a costly request from being starved by
// cheap ones but means waiters for unrelated limits must not share a queue.
//
// take is called with the queue's lock held, so calls to take for one queue
// never overlap and a grant is atomic with the waiter's state: take must be
// quick, must not block, must not panic and must not call back into the
// queue. giveBack and the caller's own code run outside the lock.
//
// A WaitQueue is safe for concurrent use. It starts no goroutines of its
// own: the only ones are the Clock's timers for MaxWait, each stopped when
// its waiter leaves the queue.
type WaitQueue struct {
	maxLen  int64
	maxWait time.Duration
	lifo    bool
	clock   shed.Clock

	// n counts waiters. It is written under mu but read without it, so that
	// Notify on an empty queue (the common case on every release) costs one
	// atomic load. A waiter stores n before its take, and a releaser frees
	// capacity before it loads n, so one of them always sees the other.
	n atomic.Int64

	// fair: waiters are shared out among clients (NewFairQueue); weight
	// is Fairness.Weight.
	fair   bool
	weight func(shed.Request) float64
	seed   maphash.Seed
	seq    uint64 // waiters that ever joined; under mu

	mu        sync.Mutex
	levels    [shed.NumPriorities]level // by Priority.Index, lowest first
	busySince time.Time                 // when the queue last became non-empty (AdaptiveLIFO)
}

// NewWaitQueue checks cfg and returns an empty queue that serves the
// waiters of one priority in arrival order, whoever sent them. Layers that
// share capacity among clients use NewFairQueue.
func NewWaitQueue(cfg shed.QueueConfig) (*WaitQueue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &WaitQueue{maxLen: int64(cfg.MaxLength), maxWait: cfg.MaxWait, lifo: cfg.AdaptiveLIFO,
		clock: clockx.Or(cfg.Clock)}, nil
}

type waitState uint8

const (
	waiting   waitState = iota
	granted             // take succeeded: the waiter owns the capacity
	timedOut            // MaxWait or the deadline passed
	evicted             // displaced by a higher-priority newcomer
	displaced           // displaced by a newcomer of a client with fewer waiters
	abandoned           // the context ended first
)

// waiter is one queued request. Its fields are guarded by the queue's mu;
// once state leaves waiting it never changes again, and ready is closed.
type waiter struct {
	prev, next *waiter
	level      int
	flow       int // index of the flow queue in its level
	take       func() bool
	state      waitState
	ready      chan struct{}
	timer      shed.Timer

	// Who asks and for how much, for the fair share (fair.go), and when
	// it came (a count of the waiters that joined before it).
	seq    uint64
	key    string
	hash   uint64
	units  int64
	weight float64
	ticket Ticket // set when granted

	// The wait it was given, the request's own deadline (zero: none),
	// and whether the wait was extended once (fair.go, extension).
	timeout  time.Duration
	hard     time.Time
	extended bool
}

// waitList is an intrusive doubly linked list, so that a waiter leaving
// from the middle (timeout, cancellation) costs O(1).
type waitList struct{ head, tail *waiter }

func (l *waitList) pushBack(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

func (l *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// Wait enqueues a request of priority p and blocks until take succeeds for
// it (the caller then owns the capacity take claimed, and Wait returns nil)
// or until it gives up. It returns how long it waited.
//
// When nobody is waiting and take succeeds at once, Wait returns at once
// without queueing (and without allocating). Otherwise the request queues
// behind everyone already waiting, even if capacity is free, so that
// newcomers never barge past waiters of their priority or above.
//
// It gives up with ErrQueueFull at once when the queue holds MaxLength
// waiters and none has a lower priority than p (when one has, the lowest
// priority waiter that would be served last is evicted and gets ErrEvicted
// at once), unless AdaptiveLIFO is in force: then the oldest waiter of p,
// which newest first serves last, gets ErrQueueFull instead; with
// ErrQueueTimeout when MaxWait or deadline (when non-zero) passes, or has
// already passed; and with an error wrapping ctx.Err() when ctx ends.
// When deadline is ctx's own deadline (as Prepare sets it), either of the
// last two may be reported: QueueRejection turns the first into a
// rejection and passes the second through.
//
// If capacity is granted at the instant the waiter gives up (its context
// ends as take succeeds), Wait calls giveBack, outside the queue's lock, to
// return the capacity to the layer, and then dispatches again so that it is
// handed to the next waiter rather than lost. giveBack may be nil only when
// take claims nothing.
func (q *WaitQueue) Wait(ctx context.Context, p shed.Priority, deadline time.Time, take func() bool, giveBack func()) (time.Duration, error) {
	_, waited, err := q.wait(ctx, shed.Request{Priority: p}, deadline, take, giveBack)
	return waited, err
}

// WaitRequest is Wait for a queue that shares capacity among clients
// (NewFairQueue): req says who waits (Key), at what priority, and for how
// many units (Units). On success it returns the Ticket of the grant, which
// the layer keeps with the lease and calls Done on when the lease is
// released, so that the time the client held its slot is charged to it.
// On a queue made by NewWaitQueue it is Wait, and its Ticket is the zero
// Ticket (whose Done does nothing).
//
// When the queue is full, the newcomer takes the place of the newest
// waiter of the client with the most waiters in its priority (which gets
// ErrQueueFull) unless it is that client; while AdaptiveLIFO is in force,
// of that client's oldest waiter, even when it is that client, unless that
// client floods: it holds most of the priority's waiters while another
// client has queued at that priority within MaxWait. A flood's newcomer is
// refused, which costs the server less than queueing it to give up
// another of the flood's waiters, and the flood's oldest waiters time out
// instead. Among clients with as many waiters, the client is the one whose
// waiter so chosen is the newest (the oldest under AdaptiveLIFO), as in a
// queue that is not fair.
func (q *WaitQueue) WaitRequest(ctx context.Context, req shed.Request, deadline time.Time, take func() bool, giveBack func()) (Ticket, time.Duration, error) {
	return q.wait(ctx, req, deadline, take, giveBack)
}

func (q *WaitQueue) wait(ctx context.Context, req shed.Request, deadline time.Time, take func() bool, giveBack func()) (Ticket, time.Duration, error) {
	if take == nil {
		return Ticket{}, 0, errors.New("shed: WaitQueue.Wait: take is nil")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	q.mu.Lock()
	if q.n.Load() == 0 && take() {
		q.mu.Unlock()
		return Ticket{}, 0, nil
	}
	if err := ctx.Err(); err != nil {
		q.mu.Unlock()
		return Ticket{}, 0, fmt.Errorf("shed: request gone before it queued: %w", err)
	}
	start := q.clock.Now()
	timeout := q.maxWait
	if !deadline.IsZero() {
		if d := deadline.Sub(start); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 {
		q.mu.Unlock()
		return Ticket{}, 0, ErrQueueTimeout
	}
	w := q.newWaiter(req, take)
	if q.n.Load() >= q.maxLen && !q.makeRoom(w, start) {
		q.mu.Unlock()
		return Ticket{}, 0, ErrQueueFull
	}
	// The timer is set before the waiter is visible (Len), so that a test
	// that sees it queued also sees its timer on a manual clock. It cannot
	// fire early: expire needs mu.
	w.timeout, w.hard = timeout, req.Deadline
	w.timer = q.clock.AfterFunc(timeout, func() { q.expire(w) })
	q.push(w, start)
	q.dispatch()
	q.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		q.mu.Lock()
		if w.state == waiting {
			q.finish(w, abandoned)
			// The waiter may have been the one holding up those behind it.
			q.dispatch()
			q.mu.Unlock()
			return Ticket{}, q.clock.Now().Sub(start), fmt.Errorf("shed: gave up waiting in queue: %w", ctx.Err())
		}
		q.mu.Unlock()
	}
	// w.state is final: it was set before ready was closed, or read under mu.
	waited := q.clock.Now().Sub(start)
	switch w.state {
	case granted:
		if err := ctx.Err(); err != nil {
			// Granted as the caller left: hand the capacity on.
			if giveBack != nil {
				giveBack()
			}
			w.ticket.Done()
			q.Notify()
			return Ticket{}, waited, fmt.Errorf("shed: gave up waiting in queue: %w", err)
		}
		return w.ticket, waited, nil
	case evicted:
		return Ticket{}, waited, ErrEvicted
	case displaced:
		return Ticket{}, waited, ErrQueueFull
	default:
		return Ticket{}, waited, ErrQueueTimeout
	}
}

// Notify says capacity may have freed: a lease was released, or a rate
// limiter refilled. It grants waiters, highest priority first, for as long
// as their take succeeds. On an empty queue it costs one atomic load.
func (q *WaitQueue) Notify() {
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	q.dispatch()
	q.mu.Unlock()
}

// Standing returns how long, as of now, the queue has held waiters without
// emptying; 0 when it is empty. A queue that stands is what CoDel calls a
// standing queue: its arrivals outrun its service, every waiter adds to
// the wait of those behind, and a layer may bound the waits of those who
// join it more tightly (Facebook's "controlled delay", in "Fail at Scale").
func (q *WaitQueue) Standing(now time.Time) time.Duration {
	if q.n.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n.Load() == 0 {
		return 0
	}
	return max(now.Sub(q.busySince), 0)
}

// Len returns how many requests are waiting.
func (q *WaitQueue) Len() int { return int(q.n.Load()) }

// dispatch grants waiters in order while their take succeeds. mu is held.
func (q *WaitQueue) dispatch() {
	if q.n.Load() == 0 {
		return
	}
	lifo := q.lifoNow(time.Time{})
	for q.n.Load() > 0 {
		w := q.first(lifo)
		if !w.take() {
			return
		}
		q.charge(w)
		q.finish(w, granted)
	}
}

// lifoNow reports whether AdaptiveLIFO is in force: the queue has been
// non-empty for longer than MaxWait/2. now may be zero to read the clock.
// mu is held.
func (q *WaitQueue) lifoNow(now time.Time) bool {
	if !q.lifo || q.n.Load() == 0 {
		return false
	}
	if now.IsZero() {
		now = q.clock.Now()
	}
	return now.Sub(q.busySince) > q.maxWait/2
}

// first returns the waiter to serve next: of the highest non-empty
// priority, the flow furthest behind in virtual time (fair.go), and of it
// the head (or, in LIFO, the tail). The queue must not be empty.
func (q *WaitQueue) first(lifo bool) *waiter {
	for i := shed.NumPriorities - 1; i >= 0; i-- {
		lv := &q.levels[i]
		if lv.n == 0 {
			continue
		}
		i, newest := lv.next(lifo)
		f := &lv.flows[i]
		if newest {
			return f.list.tail
		}
		return f.list.head
	}
	panic("shed: WaitQueue.first on an empty queue") // unreachable: callers check n
}

// victim returns the waiter a newcomer at level may evict from a full
// queue: of the lowest priority below level, the one that would be served
// last of the client with the most waiters (the newest; the oldest while
// LIFO is in force), of all such clients' when several have as many. nil
// when every waiter's priority is level or above. mu is held.
func (q *WaitQueue) victim(level int, now time.Time) *waiter {
	for i := 0; i < level; i++ {
		lv := &q.levels[i]
		if lv.n == 0 {
			continue
		}
		lifo := q.lifoNow(now)
		return lv.flows[lv.longest(lifo)].last(lifo)
	}
	return nil
}

// makeRoom frees a place in a full queue for w, which has not joined it
// yet: a waiter of lower priority is evicted (ErrEvicted) or, within w's
// priority (ErrQueueFull), a waiter of the client with the most waiters:
// its newest when that client has at least twice the waiters w's would,
// else, while AdaptiveLIFO is in force, its oldest, unless w is of that
// client while it floods. It reports false when w must be refused
// instead. mu is held.
func (q *WaitQueue) makeRoom(w *waiter, now time.Time) bool {
	if v := q.victim(w.level, now); v != nil {
		q.finish(v, evicted)
		return true
	}
	lv := &q.levels[w.level]
	if lv.n == 0 {
		return false
	}
	lifo := q.lifoNow(now)
	li := lv.longest(lifo)
	long := &lv.flows[li]
	fi := li
	if q.fair {
		fi = lv.choose(w.hash)
	}
	switch {
	case fi != li && 2*float64(lv.flows[fi].n+1)/lv.flows[fi].weightOr(w.weight) <= float64(long.n)/long.weight:
		// A client with at most half the longest's waiters takes a
		// place of the longest's.
	case !lifo:
		// Among flows about as long (a client spreading over many
		// keys, or many heavy clients) the newcomer is refused, as in
		// a queue that is not fair, rather than each displacing
		// another's newest waiter in turn.
		return false
	case fi == li && 2*long.n > lv.n && now.Sub(lv.sharedAt) < q.maxWait:
		// A flood: the client holds most of the priority's waiters
		// while others ask at it too. Its newcomer is refused rather
		// than given its oldest waiter's place: the client is refused
		// one request either way, but a newcomer that takes a place
		// costs the server a waiter, a timer and a wake-up before it
		// is given up in its turn, and under a flood that is nearly
		// every refusal, paid for out of the capacity the others share
		// (the demonstration's tenant-cpu scenario at 50x). The flood's
		// oldest waiters time out instead.
		return false
	}
	// Newest first, the oldest waiter is served last, after the newcomer
	// and all who come while it waits: it is the one to refuse. Refusing
	// the newcomer instead left the oldest holding the queue's places
	// until the queue drained, and served them then, late (the
	// demonstration's mixed scenario at 5x, and the same with fair share
	// off, where all its clients are one).
	q.finish(long.last(lifo), displaced)
	return true
}

func (q *WaitQueue) push(w *waiter, now time.Time) {
	if q.n.Load() == 0 {
		q.busySince = now
	}
	q.seq++
	w.seq = q.seq
	lv := &q.levels[w.level]
	if w.hash != lv.lastHash && lv.lastHash != 0 {
		// Another client asks at this priority (see makeRoom).
		lv.sharedAt = now
	}
	lv.lastHash = w.hash
	lv.push(w, q.fair)
	q.n.Add(1)
}

// finish takes a waiting w out of the queue in its final state and wakes
// it. mu is held. Stopping the timer under mu is safe: a Timer's Stop must
// not wait for its callback, and expire ignores a waiter that has finished.
func (q *WaitQueue) finish(w *waiter, s waitState) {
	q.levels[w.level].remove(w)
	q.n.Add(-1)
	w.state = s
	if w.timer != nil && s != timedOut {
		w.timer.Stop()
	}
	close(w.ready)
}

// expire is w's MaxWait/deadline timer.
func (q *WaitQueue) expire(w *waiter) {
	q.mu.Lock()
	if w.state == waiting {
		if d := q.extension(w); d > 0 {
			w.extended = true
			w.timer = q.clock.AfterFunc(d, func() { q.expire(w) })
		} else {
			q.finish(w, timedOut)
			q.dispatch()
		}
	}
	q.mu.Unlock()
}

// Lowest returns the priority of the lowest waiter, and false when nobody
// waits.
func (q *WaitQueue) Lowest() (shed.Priority, bool) {
	if q.n.Load() == 0 {
		return 0, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := 0; i < shed.NumPriorities; i++ {
		if q.levels[i].n != 0 {
			return shed.Priorities()[i], true
		}
	}
	return 0, false
}

// Evict does what a full queue does for a newcomer of priority p: the
// waiter of the lowest priority below p that would be served last gives up
// with ErrEvicted. It reports whether there was one. A layer that bounds
// several queues together (one per key, say) calls it on the queue that
// holds the lowest waiter, so that every layer's full queue behaves alike.
func (q *WaitQueue) Evict(p shed.Priority) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.victim(p.Index(), q.clock.Now())
	if v == nil {
		return false
	}
	q.finish(v, evicted)
	// The victim may have been the one holding up those behind it.
	q.dispatch()
	return true
}
