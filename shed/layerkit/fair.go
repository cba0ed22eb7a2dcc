package layerkit

import (
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// A fair queue (NewFairQueue) shares the capacity given to one priority
// among the clients waiting at it, max-min fairly and in bounded memory,
// the way Kubernetes' API Priority and Fairness does:
//
//   - Each priority has FairQueues flows (queues). A client (the request's
//     Key) is dealt a hand of FairHand of them from a hash of its key
//     (shuffle-sharding), and its request joins the flow of its hand it
//     already waits in, or else the shortest of the hand. A client
//     therefore waits in one flow, and two clients share a flow only when
//     every flow of one's hand is busy.
//   - Each flow keeps the service it has had in virtual time: a grant
//     charges it the request's units times the time a slot is held (an
//     average at the grant, corrected by Ticket.Done with the time the
//     slot was actually held: seat-seconds), divided by the client's
//     weight. Capacity goes to the flow of the highest priority that has
//     had the least (among flows within fairWindow grants of it, or with
//     a single waiter, to the oldest waiter, or the newest under
//     AdaptiveLIFO unless the flows held back hold most of the waiters);
//     a flow that starts waiting starts fairWindow grants behind the flow
//     served last, so that a client that asks now and then is served
//     ahead of one that keeps the queue full, and idling earns no more
//     credit.
//   - A full queue refuses the newest waiter of the client with the most
//     waiters (per weight) at the newcomer's priority, not the newcomer,
//     unless the newcomer is that client (under AdaptiveLIFO, that
//     client's oldest waiter, whoever the newcomer, unless the newcomer's
//     client floods: it holds most of the waiters while another client
//     has queued within MaxWait, and its newcomer is refused).
//   - While a client of a priority with more than one waiter is served
//     beyond the window (a flood), a client's only waiter that is next in
//     line at that priority is not refused when its wait runs out: it may
//     wait once more as long again, up to its request's Deadline. The
//     wait bound is there to refuse the flood in time for a retry, not the
//     client that only waited for the capacity higher priorities took.
//
// A client asking less than its share is served as it asks; what it leaves
// goes to the others. Memory and the time of a decision do not grow with
// the number of distinct keys: a queue holds FairQueues flows per priority
// and a bounded list of its busiest clients, whatever the keys.
//
// A client that owns many keys is as many clients: with k keys busy at one
// priority it holds up to min(k, FairQueues) flows of that priority's
// FairQueues, and a client with one key whose whole hand it occupies
// shares a flow with it, first in, first out. A client spreading its load
// over every flow therefore gets at most FairQueues/(FairQueues+1) of the
// priority's capacity while one other client waits, and that client's
// requests queue behind the many-key client's in the flow they share.
const (
	// FairQueues is the number of flows per priority of a fair queue.
	FairQueues = 64
	// FairHand is the number of flows dealt to each client.
	FairHand = 8
)

// Fairness configures how a layer's queue shares capacity among clients.
// The zero value is fair, every client weighing the same.
type Fairness struct {
	// Off serves the waiters of one priority in arrival order, whoever sent
	// them (the queue of NewWaitQueue).
	Off bool
	// Weight returns a client's weight (a tier): a client of weight 2 gets
	// twice the share of a client of weight 1 when both ask for more than
	// their share. It is called only for requests that queue. nil, or a
	// result that is not a positive number, weighs 1.
	Weight func(shed.Request) float64
}

// NewFairQueue checks cfg and returns an empty queue that shares capacity
// among clients within each priority as f says (see FairQueues). Requests
// join it with WaitRequest; Wait queues them as one client.
func NewFairQueue(cfg shed.QueueConfig, f Fairness) (*WaitQueue, error) {
	q, err := NewWaitQueue(cfg)
	if err != nil {
		return nil, err
	}
	q.fair, q.weight, q.seed = !f.Off, f.Weight, maphash.MakeSeed()
	return q, nil
}

// level is the waiters of one priority: one flow for a queue that is not
// fair, FairQueues for one that is (allocated when the first waits).
type level struct {
	flows    []flow
	nonEmpty uint64 // bit i: flows[i] has waiters
	n        int
	// vnow is the virtual time of the flow served last: a flow that
	// starts waiting starts there.
	vnow float64
	// hold is the average time a granted unit held its slot (ns): what a
	// grant charges before its Ticket says.
	hold float64
	held bool // hold has been measured
	top  topClients
	// lastHash is the key hash of the waiter that joined last, and
	// sharedAt when a waiter joined whose key was not the one before
	// it: whether other clients ask at this priority, so that a client
	// holding most of its waiters is a flood (makeRoom).
	lastHash uint64
	sharedAt time.Time
}

// flow is one queue of a level.
type flow struct {
	list   waitList
	n      int
	owner  uint64  // key hash of the waiter that joined last
	weight float64 // its weight
	served float64 // virtual time: seat-ns served, per weight
}

// fairWindow is, in grants (the average charge of one), how far ahead of
// the least served client a client may be and still be served in arrival
// order, and how far behind the client served last a client that starts
// waiting starts. Being one number, a newcomer is served ahead of every
// client served since it last waited, whatever the window. The window is
// wide so that a flood of many equal keys, each asking more than its
// share, is served nearly in arrival order: fair queuing among equals
// only reorders them, which lengthens the tail of everybody's latency
// (the demonstration's I/O-bound scenario compares the set-ups loadshed
// and loadshed-fifo).
const fairWindow = 8

// initialHold is what a grant charges per unit before any Ticket said how
// long slots are held. Any positive value does: Done corrects it.
const initialHold = float64(time.Millisecond)

func (q *WaitQueue) newWaiter(req shed.Request, take func() bool) *waiter {
	w := &waiter{level: req.Priority.Index(), take: take, ready: make(chan struct{}), units: req.Units(), weight: 1}
	if q.fair {
		w.key = req.Key
		w.hash = maphash.String(q.seed, req.Key)
		if q.weight != nil {
			if x := q.weight(req); x > 0 && x <= math.MaxFloat32 {
				w.weight = x
			}
		}
	}
	return w
}

func (lv *level) push(w *waiter, fair bool) {
	if lv.flows == nil {
		n := 1
		if fair {
			n = FairQueues
		}
		lv.flows = make([]flow, n)
		lv.hold = initialHold
		for i := range lv.flows {
			// No credit to carry: a flow's first client starts where
			// any newcomer does.
			lv.flows[i].served = math.Inf(-1)
		}
	}
	i := lv.choose(w.hash)
	f := &lv.flows[i]
	if f.n == 0 {
		f.served = max(f.served, lv.vnow-fairWindow*lv.hold)
		lv.nonEmpty |= 1 << i
	}
	f.list.pushBack(w)
	f.n++
	f.owner, f.weight = w.hash, w.weight
	w.flow = i
	lv.n++
}

func (lv *level) remove(w *waiter) {
	f := &lv.flows[w.flow]
	f.list.remove(w)
	if f.n--; f.n == 0 {
		lv.nonEmpty &^= 1 << w.flow
	}
	lv.n--
}

// choose returns the flow a waiter whose key hashes to h joins: of the
// hand h deals, the flow it waits in already, else the shortest (the
// first dealt among equals, so that a client alone always uses the same).
func (lv *level) choose(h uint64) int {
	if len(lv.flows) < FairQueues {
		return 0
	}
	var hand [FairHand]int
	best, v := -1, h
	for i := 0; i < FairHand; i++ {
		// The r-th card of those left in the deck, a mixed-radix digit of
		// the hash (APF's dealer): the hand's cards are distinct.
		left := uint64(FairQueues - i)
		c := int(v % left)
		v /= left
		j := 0
		for ; j < i && hand[j] <= c; j++ {
			c++
		}
		copy(hand[j+1:i+1], hand[j:i])
		hand[j] = c
		f := &lv.flows[c]
		if f.n > 0 && f.owner == h {
			return c
		}
		if best < 0 || f.n < lv.flows[best].n {
			best = c
		}
	}
	return best
}

// next returns the flow to serve, and whether its newest waiter goes
// first: of the non-empty flows within fairWindow grants' charge of the
// least served in virtual time, or with one waiter, the one whose waiter
// is oldest (newest under LIFO). Clients even in their service are so
// served in the order a plain queue would serve them, and a client ahead
// of another by more than the window waits for it while it has more than
// one waiter. A client with one waiter holds no backlog to hold back:
// among many clients that ask alike, each with a waiter or two, chance
// alone puts some a window ahead of the least served, and holding their
// waiters back only reordered them (the demonstration's I/O-bound
// scenario at 5x: the p99 of all admitted 2.15-2.39 times the floor's
// with them held back, 1.85-2.0 without, against 1.73-1.91 for a plain
// queue in the same runs).
//
// While the clients so held back hold most of the level's waiters (a
// flood), the others are served oldest first, LIFO or not. LIFO is for a
// standing queue, to serve the waiters whose callers are still there and
// let the oldest time out; the flood is that standing queue. The others
// each wait for the next free slot, and newest first only put a client
// that asked a moment later ahead of one that asked before (the
// demonstration's tenant-cpu scenario at 50x: a light client's request
// waited 30ms, three services, while two that came after it were
// served). Among many clients that ask alike, the few that chance puts a
// window ahead hold a few waiters, and the rest stay newest first: all
// oldest first whenever one was held back put the I/O-bound scenario's
// p99 of all admitted at 5x at 2.87 times the floor's in one run.
// The level must not be empty.
func (lv *level) next(lifo bool) (int, bool) {
	least := math.Inf(1)
	for m := lv.nonEmpty; m != 0; m &= m - 1 {
		least = min(least, lv.flows[bits.TrailingZeros64(m)].served)
	}
	bound := least + fairWindow*lv.hold
	heldBack := func(f *flow) bool { return f.served > bound && f.served != least && f.n > 1 }
	if lifo {
		held := 0
		for m := lv.nonEmpty; m != 0; m &= m - 1 {
			if f := &lv.flows[bits.TrailingZeros64(m)]; heldBack(f) {
				held += f.n
			}
		}
		lifo = 2*held <= lv.n
	}
	best := -1
	var bestSeq uint64
	for m := lv.nonEmpty; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		f := &lv.flows[i]
		if heldBack(f) {
			continue
		}
		seq := f.list.head.seq
		if lifo {
			seq = f.list.tail.seq
		}
		if best < 0 || lifo && seq > bestSeq || !lifo && seq < bestSeq {
			best, bestSeq = i, seq
		}
	}
	return best, lifo
}

// extension returns how much longer w may wait once its wait has run out,
// or 0: a waiter that is its client's only one, whose client is next in
// line at its priority (within the window of the least served) while
// clients of that priority served beyond the window, each with more than
// one waiter, hold most of its waiters (a flood, as next says: among many
// alike clients, chance alone puts one a window ahead with two waiters,
// and a longer wait then only lengthened the tail, to 600ms among 64
// alike clients at 5x in the demonstration's mixed scenario), waits once
// more as long again, though not past its request's own deadline. A
// standing queue is made by the clients that keep it full, and its wait
// bound is there to refuse their requests in time for a retry; a client
// that asks now and then is not one of them, and it waited only for the
// capacity that higher priorities took. mu is held.
func (q *WaitQueue) extension(w *waiter) time.Duration {
	if !q.fair || w.extended {
		return 0
	}
	lv := &q.levels[w.level]
	f := &lv.flows[w.flow]
	if f.n != 1 || f.owner != w.hash {
		return 0
	}
	ahead := 0 // waiters of clients with a backlog beyond the window
	for m := lv.nonEmpty; m != 0; m &= m - 1 {
		o := &lv.flows[bits.TrailingZeros64(m)]
		if o.served+fairWindow*lv.hold < f.served {
			return 0 // not next in line
		}
		if o.n > 1 && o.served > f.served+fairWindow*lv.hold {
			ahead += o.n
		}
	}
	if 2*ahead <= lv.n {
		return 0 // nobody keeps the queue full: MaxWait as it is
	}
	d := w.timeout
	if !w.hard.IsZero() {
		d = min(d, w.hard.Sub(q.clock.Now()))
	}
	return d
}

// longest returns the non-empty flow with the most waiters per weight
// and, among flows as long, the one whose waiter that would be served
// last (flow.last) is served last of theirs: the oldest under LIFO, else
// the newest, as a queue that is not fair would choose. Among many alike
// clients each flow holds a waiter or two, and the flow of the lowest
// index, taken for the longest, gave up a waiter at random: the oldest
// then stayed to be served late, and the demonstration's mixed scenario
// at 5x put the p99 of all admitted at 2.0-2.3 times the floor's, against
// 1.6-1.8 with fair share off in the same runs. The level must not be
// empty.
func (lv *level) longest(lifo bool) int {
	m := lv.nonEmpty
	best := bits.TrailingZeros64(m)
	for m &= m - 1; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		f, b := &lv.flows[i], &lv.flows[best]
		switch x, y := float64(f.n)/f.weight, float64(b.n)/b.weight; {
		case x > y:
			best = i
		case x == y && lifo && f.last(lifo).seq < b.last(lifo).seq:
			best = i
		case x == y && !lifo && f.last(lifo).seq > b.last(lifo).seq:
			best = i
		}
	}
	return best
}

// weightOr is the weight of f's waiters, or w when it has none.
func (f *flow) weightOr(w float64) float64 {
	if f.n == 0 {
		return w
	}
	return f.weight
}

// last returns the waiter of f that would be served last: its oldest
// while LIFO is in force, else its newest. f must not be empty.
func (f *flow) last(lifo bool) *waiter {
	if lifo {
		return f.list.head
	}
	return f.list.tail
}

// Ticket is a grant of a fair queue, kept by the layer with the lease
// until it is released. Its zero value (a grant that did not queue, or
// from a queue that is not fair) does nothing.
type Ticket struct {
	q       *WaitQueue
	key     string
	hash    uint64
	at      int64 // grant time, ns of the queue's clock
	units   int64
	weight  float64
	charged float64 // seat-ns charged at the grant
	level   int8
	flow    int8
}

// Done tells the queue that the slot granted is free again, so that the
// time it was held is charged to the client: a client whose requests hold
// slots longer is served less often. Call it when the lease is released;
// it clears t, so that a second call does nothing, and costs a nil check
// on the zero Ticket.
func (t *Ticket) Done() {
	if t.q != nil {
		t.done()
		*t = Ticket{}
	}
}

func (t *Ticket) done() {
	q := t.q
	now := q.clock.Now().UnixNano()
	held := float64(max(now-t.at, 0))
	seat := held * float64(t.units)
	q.mu.Lock()
	lv := &q.levels[t.level]
	if lv.held {
		lv.hold += (held - lv.hold) / holdSmoothing
	} else {
		// The first hold measured replaces the guess at once: the window
		// and a newcomer's credit are counted in it.
		lv.hold, lv.held = held, true
	}
	lv.flows[t.flow].served += (seat - t.charged) / t.weight
	lv.top.done(now, t.hash, seat-t.charged, t.units)
	q.mu.Unlock()
}

// holdSmoothing is the number of grants the average hold mostly reflects.
const holdSmoothing = 16

// charge bills w's flow for the grant about to be made, as an estimate
// that its Ticket corrects, and moves the level's virtual time to the
// flow's. mu is held.
func (q *WaitQueue) charge(w *waiter) {
	if !q.fair {
		return
	}
	lv := &q.levels[w.level]
	f := &lv.flows[w.flow]
	lv.vnow = max(lv.vnow, f.served)
	est := lv.hold * float64(w.units)
	f.served += est / w.weight
	now := q.clock.Now().UnixNano()
	lv.top.add(now, w.hash, w.key, est, w.units)
	w.ticket = Ticket{q: q, key: w.key, hash: w.hash, at: now, units: w.units, weight: w.weight,
		charged: est, level: int8(w.level), flow: int8(w.flow)}
}

// topClients is a Space-Saving summary of the clients served most at one
// priority: a fixed number of entries, whatever the keys, each an upper
// bound of a client's service (seat-ns), halved every topHalfLife so that
// it tells who is served now.
type topClients struct {
	e       [topSize]topEntry
	total   float64
	decayed int64 // when the counts were last halved, ns
}

type topEntry struct {
	key      string
	hash     uint64
	served   float64
	inflight int64
}

const (
	topSize     = 32
	topHalfLife = 10 * time.Second
)

func (t *topClients) decay(now int64) {
	if t.decayed == 0 {
		t.decayed = now
		return
	}
	k := (now - t.decayed) / int64(topHalfLife)
	if k <= 0 {
		return
	}
	t.decayed += k * int64(topHalfLife)
	f := math.Ldexp(1, -int(min(k, 1000)))
	t.total *= f
	for i := range t.e {
		t.e[i].served *= f
	}
}

func (t *topClients) add(now int64, h uint64, key string, cost float64, units int64) {
	t.decay(now)
	t.total += cost
	low := 0
	for i := range t.e {
		e := &t.e[i]
		if e.hash == h && e.key == key {
			e.served += cost
			e.inflight += units
			return
		}
		if e.served < t.e[low].served {
			low = i
		}
	}
	// Space-Saving: the newcomer takes the least-served entry's place and
	// count, an upper bound of what it had.
	e := &t.e[low]
	*e = topEntry{key: key, hash: h, served: e.served + cost, inflight: units}
}

func (t *topClients) done(now int64, h uint64, cost float64, units int64) {
	t.decay(now)
	t.total = max(t.total+cost, 0)
	for i := range t.e {
		if e := &t.e[i]; e.hash == h && e.served > 0 {
			e.served = max(e.served+cost, 0)
			e.inflight = max(e.inflight-units, 0)
			return
		}
	}
}

// MakeRoom does, for a newcomer req, what a full queue does (see
// WaitRequest): a waiter of lower priority is evicted (ErrEvicted), or at
// req's priority (ErrQueueFull) the newest waiter of the client with at
// least twice the waiters req's would have, or under AdaptiveLIFO the
// oldest waiter of the client with the most, unless req's client is that
// client and it floods. It reports whether it made
// room. A layer that bounds the queue below its MaxLength calls it when
// its own bound is reached, and then queues req (WaitRequest).
//
// It grants nothing: req's WaitRequest, which follows, grants what is
// free with req among the waiters. Capacity can be free with waiters
// queued (the worker layer leaves released capacity to a hand-off for a
// grace), and granted here it went to the waiter first in line before
// req had joined: a light client's request arriving during a flood made
// room by evicting one of the flood's waiters, handed the capacity to
// another, and waited for the next (the demonstration's tenant-cpu
// scenario at 50x: 5 to 21 of about 150 light requests in each of six
// traced runs, each then waiting a whole service more; none of 157 in a
// traced run without the grant).
func (q *WaitQueue) MakeRoom(req shed.Request) bool {
	if q.n.Load() == 0 {
		return false
	}
	w := q.newWaiter(req, nil)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.makeRoom(w, q.clock.Now())
}

// FlowStats returns, for priority p, how many clients (flows) wait now and
// the fair share: the part of the capacity given to p that a client of
// weight 1 gets while they all ask for more than it (1 when none waits).
// It takes the queue's lock: for gauges, not for the request path.
func (q *WaitQueue) FlowStats(p shed.Priority) (clients int, share float64) {
	if q == nil {
		return 0, 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	lv := &q.levels[p.Index()]
	sum := 0.0
	for m := lv.nonEmpty; m != 0; m &= m - 1 {
		sum += lv.flows[bits.TrailingZeros64(m)].weight
		clients++
	}
	if clients == 0 {
		return 0, 1
	}
	return clients, 1 / max(sum, 1e-9)
}

// TopClients returns at most n clients with the largest shares of the
// capacity the queues served through their grants recently (what was
// granted at once, with nobody waiting, is not counted), largest first.
// Shares are of the queues' service together. It is for a layer's
// ClientReporter: bounded work, under each queue's lock in turn.
func TopClients(n int, queues ...*WaitQueue) []ClientShare {
	var (
		out   []ClientShare
		total float64
	)
	for _, q := range queues {
		if q == nil || !q.fair {
			continue
		}
		now := q.clock.Now().UnixNano()
		q.mu.Lock()
		for li := range q.levels {
			lv := &q.levels[li]
			lv.top.decay(now)
			total += lv.top.total
			for _, e := range lv.top.e {
				if e.served <= 0 && e.inflight == 0 {
					continue
				}
				queued := 0
				for m := lv.nonEmpty; m != 0; m &= m - 1 {
					if f := &lv.flows[bits.TrailingZeros64(m)]; f.owner == e.hash {
						queued += f.n
					}
				}
				out = append(out, ClientShare{Key: e.key, Priority: shed.Priorities()[li],
					InFlight: e.inflight, Queued: queued, Share: e.served})
			}
		}
		q.mu.Unlock()
	}
	for i := range out {
		if total > 0 {
			out[i].Share = min(out[i].Share/total, 1)
		} else {
			out[i].Share = 0
		}
	}
	slices.SortStableFunc(out, func(a, b ClientShare) int {
		switch {
		case a.Share > b.Share:
			return -1
		case a.Share < b.Share:
			return 1
		}
		return 0
	})
	if n < 0 {
		n = 0
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}
