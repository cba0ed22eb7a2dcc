package main

import (
	"cmp"
	"slices"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// The floor is what a perfect strict-priority scheduler with no overhead of
// its own would have made of the very arrivals a run offered: the figures
// the targets are measured against (critical p99 within 1.5× the floor's,
// p99 of everything admitted within 2×). It is simulated, not measured, so
// it is the same on any machine for the same arrivals.
//
// The model: servers identical servers (1 for a service bound by one CPU,
// the pool's size for one bound by a downstream pool), each taking service
// to answer a request (servers / capacity: the floor has exactly the
// measured capacity), that long times the slowdown in force when it
// starts (a capacity drop). Non-preemptive and work-conserving: a server
// that comes free takes a waiting request at once, the highest priority
// first. A request that can no longer be answered within the client's
// timeout is dropped without costing anything (a shed that costs nothing);
// the requests left waiting when the flood ends are never answered.
//
// Within a priority the scheduler can serve the oldest first (FIFO: the
// shortest tail while the priority's own load fits) or the newest first
// (LIFO: the shortest waits for those served once it does not, the rest
// timing out). A perfect scheduler would pick per priority whichever is
// better, so the floor runs three orders (all oldest first, all newest
// first, critical oldest first and the rest newest first) and keeps, for
// each figure, the best.

// arrival is one offered request, as the floor sees it.
type arrival struct {
	at     time.Duration // since the flood began
	prio   shed.Priority
	client int // its key's index; the floor tells clients apart when fair
}

// slowdown is a stretch of time when the service runs factor times slower
// (a downstream at a third of its speed: 3; a CPU shared half and half
// with a neighbour: 2).
type slowdown struct {
	from, to time.Duration
	factor   float64
}

// floorModel is the scheduler the floor simulates.
type floorModel struct {
	servers int
	service time.Duration // per request, at full speed
	timeout time.Duration // the client's: an answer later than that is a failure
	slow    []slowdown
	// end, when set, is when the flood ends: the floor starts nothing it
	// cannot finish by then. Otherwise, once the arrivals stop, it would
	// go on answering the backlog it kept for up to a timeout, answers a
	// scheduler that sheds would never have given, and the p99 of
	// everything answered would be the timeout's.
	end time.Duration
	// fair: within a priority, the floor shares the servers max-min fairly
	// among the clients (fairLevel), as a perfect fair scheduler would;
	// otherwise it treats every request as one client's, so that a
	// scenario whose clients all ask alike is judged against the plain
	// strict-priority scheduler.
	fair bool
}

// queueOrder is which request of a priority the floor serves first.
type queueOrder int

const (
	oldestFirst queueOrder = iota
	newestFirst
	// criticalOldestFirst serves critical requests oldest first and the
	// others newest first: the order for a load whose critical part fits
	// and whose other parts do not.
	criticalOldestFirst
)

// oldestFirstFor is whether the order serves priority index p oldest first.
func (o queueOrder) oldestFirstFor(p int) bool {
	switch o {
	case oldestFirst:
		return true
	case criticalOldestFirst:
		return p == shed.Critical.Index()
	}
	return false
}

// serviceAt is how long a request that starts at t takes.
func (m floorModel) serviceAt(t time.Duration) time.Duration {
	for _, s := range m.slow {
		if t >= s.from && t < s.to {
			return time.Duration(float64(m.service) * s.factor)
		}
	}
	return m.service
}

// cutByEnd marks a request the floor would have answered in time, but
// after the end of the flood: it counts neither as answered nor as failed.
const cutByEnd = -2

// simulate runs the scheduler over arrivals (sorted by time) and returns
// each one's latency, -1 for those never answered in time (cutByEnd for
// those cut by the end).
func (m floorModel) simulate(arr []arrival, order queueOrder) []time.Duration {
	lat := make([]time.Duration, len(arr))
	for i := range lat {
		lat[i] = -1
	}
	free := make([]time.Duration, max(1, m.servers)) // when each server comes free
	var levels [shed.NumPriorities]fairLevel
	waiting := 0
	next := 0 // the next arrival not yet queued
	enqueue := func(until time.Duration) {
		for ; next < len(arr) && arr[next].at <= until; next++ {
			client := 0
			if m.fair {
				client = arr[next].client
			}
			levels[arr[next].prio.Index()].add(client, next)
			waiting++
		}
	}
	for {
		s := 0
		for i, t := range free {
			if t < free[s] {
				s = i
			}
		}
		now := free[s]
		enqueue(now)
		if waiting == 0 {
			if next == len(arr) {
				break
			}
			now = arr[next].at
			enqueue(now)
		}
		// The most important waiting request that can still be answered in
		// time, of the client owed the most; the ones that cannot are
		// dropped on the way, costing their client nothing.
		picked := -1
		for p := shed.NumPriorities - 1; p >= 0 && picked < 0; p-- {
			lv := &levels[p]
			for picked < 0 {
				q := lv.first()
				if q == nil {
					break
				}
				i := q.take(order.oldestFirstFor(p))
				waiting--
				done := now + m.serviceAt(now)
				switch {
				case done > arr[i].at+m.timeout:
				case m.end > 0 && done > m.end:
					lat[i] = cutByEnd
				default:
					picked = i
					lv.served(q)
				}
				lv.settle(q)
			}
		}
		if picked < 0 {
			continue
		}
		done := now + m.serviceAt(now)
		lat[picked] = done - arr[picked].at
		free[s] = done
	}
	return lat
}

// fairLevel is one priority's waiting requests, by client, served max-min
// fair: start-time fair queuing with every request costing the same (the
// floor's service time). Each client waiting has a start tag, the virtual
// time at which its next request is due; the client with the smallest is
// served next and its tag moves on by one. A client that starts waiting
// again begins at the level's virtual time (the tag of the request last
// served), or at its own last finish if that is later: time it spent idle
// earns it no credit, and a client asking less than its share is served
// as soon as a server comes free. With one client it is that client's
// queue, in the order asked.
type fairLevel struct {
	clients map[int]*clientQueue
	active  []*clientQueue // the clients with requests waiting
	virtual float64
	seq     int // activations so far, to break ties by who came first
}

// clientQueue is one client's waiting requests at one priority, as
// indexes into the arrivals.
type clientQueue struct {
	reqs          []int
	head          int
	start, finish float64
	since         int // the activation that made it active
}

func (q *clientQueue) empty() bool { return q.head == len(q.reqs) }

// take removes the oldest waiting request, or the newest.
func (q *clientQueue) take(oldest bool) int {
	if oldest {
		q.head++
		return q.reqs[q.head-1]
	}
	i := q.reqs[len(q.reqs)-1]
	q.reqs = q.reqs[:len(q.reqs)-1]
	return i
}

func (lv *fairLevel) add(client, i int) {
	if lv.clients == nil {
		lv.clients = map[int]*clientQueue{}
	}
	q := lv.clients[client]
	if q == nil {
		q = &clientQueue{}
		lv.clients[client] = q
	}
	if q.empty() {
		q.reqs, q.head = q.reqs[:0], 0
		q.start = max(lv.virtual, q.finish)
		lv.seq++
		q.since = lv.seq
		lv.active = append(lv.active, q)
	}
	q.reqs = append(q.reqs, i)
}

// first is the waiting client due first; nil when none waits.
func (lv *fairLevel) first() *clientQueue {
	var best *clientQueue
	for _, q := range lv.active {
		if best == nil || q.start < best.start || (q.start == best.start && q.since < best.since) {
			best = q
		}
	}
	return best
}

// served charges q for the request just taken from it.
func (lv *fairLevel) served(q *clientQueue) {
	lv.virtual = q.start
	q.finish = q.start + 1
	q.start = q.finish
}

// settle takes q off the active clients once it has nothing waiting.
func (lv *fairLevel) settle(q *clientQueue) {
	if !q.empty() {
		return
	}
	for j, a := range lv.active {
		if a == q {
			lv.active[j] = lv.active[len(lv.active)-1]
			lv.active = lv.active[:len(lv.active)-1]
			return
		}
	}
}

// floorFigures are the floor's figures over the measured arrivals.
type floorFigures struct {
	criticalSuccess float64       // share of critical requests answered in time
	goodput         float64       // answers per second
	criticalP99     time.Duration // of the critical requests answered
	allP99          time.Duration // of every request answered
	served, sent    int
	// light is the light clients' figures by priority index, and
	// [shed.NumPriorities] of them all, when the floor is fair (the
	// tenant scenarios).
	light [shed.NumPriorities + 1]classFigures
}

// floor simulates the queue orders over arr and keeps the best of each
// figure, counting only the arrivals at or after from (the warm-up before
// it fills the queues, as it did in the run) over a measured length of
// measure. It returns the oldest-first latencies too, by arrival, for the
// floor's goodput over time.
func (m floorModel) floor(arr []arrival, from, measure time.Duration) (floorFigures, []time.Duration) {
	var best floorFigures
	var fifo []time.Duration
	for n, order := range []queueOrder{oldestFirst, newestFirst, criticalOldestFirst} {
		lat := m.simulate(arr, order)
		f := figuresOf(arr, lat, from, measure, m.fair)
		if n == 0 {
			best, fifo = f, lat
			continue
		}
		best.criticalSuccess = max(best.criticalSuccess, f.criticalSuccess)
		best.goodput = max(best.goodput, f.goodput)
		if f.served > best.served {
			// What an order cuts at the end of the flood counts as
			// neither sent nor served, and orders cut different
			// requests: the two figures come from the same order.
			best.served, best.sent = f.served, f.sent
		}
		if f.criticalP99 > 0 && (best.criticalP99 == 0 || f.criticalP99 < best.criticalP99) {
			best.criticalP99 = f.criticalP99
		}
		if f.allP99 > 0 && (best.allP99 == 0 || f.allP99 < best.allP99) {
			best.allP99 = f.allP99
		}
		for i, c := range f.light {
			b := &best.light[i]
			b.success, b.served = max(b.success, c.success), max(b.served, c.served)
			if c.p99 > 0 && (b.p99 == 0 || c.p99 < b.p99) {
				b.p99 = c.p99
			}
		}
	}
	return best, fifo
}

// figuresOf is the floor's figures for latencies lat of arr; with light,
// the light clients' too.
func figuresOf(arr []arrival, lat []time.Duration, from, measure time.Duration, light bool) floorFigures {
	var f floorFigures
	var crit, all []time.Duration
	var lightLat [shed.NumPriorities + 1][]time.Duration
	critSent := 0
	for i, a := range arr {
		if a.at < from || lat[i] == cutByEnd {
			continue
		}
		f.sent++
		isCrit := a.prio == shed.Critical
		if isCrit {
			critSent++
		}
		isLight := light && a.client != heavyKey
		if isLight {
			f.light[a.prio.Index()].sent++
			f.light[shed.NumPriorities].sent++
		}
		if lat[i] < 0 {
			continue
		}
		if isLight {
			for _, j := range []int{a.prio.Index(), shed.NumPriorities} {
				f.light[j].served++
				lightLat[j] = append(lightLat[j], lat[i])
			}
		}
		f.served++
		all = append(all, lat[i])
		if isCrit {
			crit = append(crit, lat[i])
		}
	}
	if critSent > 0 {
		f.criticalSuccess = float64(len(crit)) / float64(critSent)
	}
	f.goodput = float64(f.served) / measure.Seconds()
	f.criticalP99, f.allP99 = percentile(crit, 0.99), percentile(all, 0.99)
	for j := range f.light {
		if c := &f.light[j]; c.sent > 0 {
			c.success = float64(c.served) / float64(c.sent)
			c.p99 = percentile(lightLat[j], 0.99)
		}
	}
	return f
}

// arrivalsOf is the arrivals of a run's samples, in time order.
func arrivalsOf(samples []sample) []arrival {
	arr := make([]arrival, len(samples))
	for i, s := range samples {
		arr[i] = arrival{at: s.at, prio: s.prio, client: s.key}
	}
	slices.SortStableFunc(arr, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	return arr
}
