package ratelimit

import (
	"math/bits"
	"sync"
	"time"
)

func nanos(n int64) time.Duration { return time.Duration(n) }

// fixedCell counts units per Period-long window aligned on the Unix epoch.
// Allowed when count + cost ≤ Quantity. Remaining = Quantity − count;
// ResetAfter, and RetryAfter when denied, run to the window's end.
type fixedCell struct {
	mu    sync.Mutex
	start int64 // window start, Unix ns; dead once retired
	count int64
}

func (c *fixedCell) init(p *params, now int64) { c.start = floorTo(now, p.period) }

func (c *fixedCell) take(p *params, now, cost int64) (Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return Result{}, false
	}
	ws := floorTo(now, p.period)
	if ws != c.start {
		c.start, c.count = ws, 0
	}
	end := nanos(ws + p.period - now)
	if cost > p.q-c.count { // count ≤ Quantity: no overflow, unlike count+cost
		return Result{Limit: p.q, Remaining: p.q - c.count, RetryAfter: end, ResetAfter: end}, true
	}
	c.count += cost
	return Result{Allowed: true, Limit: p.q, Remaining: p.q - c.count, ResetAfter: end}, true
}

func (c *fixedCell) giveBack(p *params, now, cost int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	if c.start == floorTo(now, p.period) {
		c.count = max(c.count-cost, 0)
	}
	return true
}

func (c *fixedCell) retire(p *params, now, idle int64, force bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	rest := c.start + p.period
	if c.count == 0 {
		rest = c.start
	}
	if !force && rest > now-idle {
		return false
	}
	c.start = dead
	return true
}

// slidingCell is the sliding window counter: the current aligned window's
// count plus the previous window's, weighted by how much of it the last
// Period still overlaps, rounded up:
//
//	used = cur + ⌈prev · (Period − elapsed) / Period⌉
//
// Allowed when used + cost ≤ Quantity; Remaining = Quantity − used.
// RetryAfter and ResetAfter are the exact instants, assuming no further
// traffic, at which the weighted count has fallen far enough.
type slidingCell struct {
	mu    sync.Mutex
	start int64 // current window start, Unix ns; dead once retired
	cur   int64
	prev  int64
}

func (c *slidingCell) init(p *params, now int64) { c.start = floorTo(now, p.period) }

// roll moves the windows on to the one holding now and returns its start.
func (c *slidingCell) roll(p *params, now int64) int64 {
	ws := floorTo(now, p.period)
	switch ws {
	case c.start:
	case c.start + p.period:
		c.start, c.prev, c.cur = ws, c.cur, 0
	default:
		c.start, c.prev, c.cur = ws, 0, 0
	}
	return ws
}

// weigh returns ⌈n·x/period⌉ without overflow (0 ≤ x ≤ period).
func weigh(n, x, period int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(x))
	q, r := bits.Div64(hi, lo, uint64(period))
	if r != 0 {
		q++
	}
	return int64(q)
}

// settles returns the least elapsed time e in [0, period] into a window at
// which a previous count of n weighs at most room: ⌈n·(period−e)/period⌉ ≤
// room ⇔ period − e ≤ ⌊room·period/n⌋.
func settles(n, room, period int64) int64 {
	if n <= room {
		return 0
	}
	hi, lo := bits.Mul64(uint64(room), uint64(period))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return period - int64(q)
}

func (c *slidingCell) figures(p *params, now, ws int64) (used, reset int64) {
	e := now - ws
	used = c.cur + weigh(c.prev, p.period-e, p.period)
	switch {
	case c.cur > 0:
		reset = p.period - e + settles(c.cur, 0, p.period)
	case c.prev > 0:
		reset = p.period - e
	}
	return used, reset
}

func (c *slidingCell) take(p *params, now, cost int64) (Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return Result{}, false
	}
	ws := c.roll(p, now)
	used, reset := c.figures(p, now, ws)
	if cost <= p.q-used {
		c.cur += cost
		used, reset = c.figures(p, now, ws)
		return Result{Allowed: true, Limit: p.q, Remaining: max(p.q-used, 0), ResetAfter: nanos(reset)}, true
	}
	e := now - ws
	var retry int64
	if room := p.q - cost - c.cur; room >= 0 {
		retry = settles(c.prev, room, p.period) - e
	} else {
		retry = p.period - e + settles(c.cur, p.q-cost, p.period)
	}
	return Result{Limit: p.q, Remaining: max(p.q-used, 0), RetryAfter: nanos(retry), ResetAfter: nanos(reset)}, true
}

func (c *slidingCell) giveBack(p *params, now, cost int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	switch floorTo(now, p.period) {
	case c.start:
		c.cur = max(c.cur-cost, 0)
	case c.start + p.period: // taken just before the window turned
		c.roll(p, now)
		c.prev = max(c.prev-cost, 0)
	}
	return true
}

func (c *slidingCell) retire(p *params, now, idle int64, force bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	rest := c.start
	switch {
	case c.cur > 0:
		rest += 2 * p.period
	case c.prev > 0:
		rest += p.period
	}
	if !force && rest > now-idle {
		return false
	}
	c.start = dead
	return true
}

// logCell is the sliding window log: each admitted request's instant and
// cost, in a ring of at most Quantity entries (each costs at least one unit
// and the entries within one Period add up to at most Quantity). An entry
// at t counts while now < t + Period. Allowed when the units counted plus
// cost ≤ Quantity. RetryAfter is when enough of the oldest entries expire;
// ResetAfter when the newest does.
type logCell struct {
	mu   sync.Mutex
	dead bool
	used int64 // units in the ring
	head int   // index of the oldest entry
	n    int   // entries in the ring
	ring []logEntry
}

type logEntry struct{ t, cost int64 }

func (c *logCell) init(p *params, _ int64) { c.ring = make([]logEntry, min(p.q, 4)) }

func (c *logCell) at(i int) *logEntry { return &c.ring[(c.head+i)%len(c.ring)] }

func (c *logCell) expire(p *params, now int64) {
	for c.n > 0 {
		e := c.at(0)
		if e.t+p.period > now {
			return
		}
		c.used -= e.cost
		c.head = (c.head + 1) % len(c.ring)
		c.n--
	}
}

func (c *logCell) push(p *params, now, cost int64) {
	if c.n > 0 {
		if last := c.at(c.n - 1); last.t == now {
			last.cost += cost
			return
		}
	}
	// Every entry holds at least one unit and take admits at most Quantity
	// units per Period, so a full ring of Quantity entries never gets here.
	if c.n == len(c.ring) { // grow, up to Quantity entries
		grown := make([]logEntry, min(int64(2*len(c.ring)), p.q))
		for i := 0; i < c.n; i++ {
			grown[i] = *c.at(i)
		}
		c.ring, c.head = grown, 0
	}
	*c.at(c.n) = logEntry{now, cost}
	c.n++
}

func (c *logCell) take(p *params, now, cost int64) (Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return Result{}, false
	}
	c.expire(p, now)
	if cost <= p.q-c.used {
		c.push(p, now, cost)
		c.used += cost
		return Result{Allowed: true, Limit: p.q, Remaining: p.q - c.used, ResetAfter: nanos(p.period)}, true
	}
	var retry int64
	freed := int64(0)
	for i := 0; i < c.n; i++ {
		e := c.at(i)
		freed += e.cost
		if cost <= p.q-(c.used-freed) {
			retry = e.t + p.period - now
			break
		}
	}
	reset := c.at(c.n-1).t + p.period - now
	return Result{Limit: p.q, Remaining: p.q - c.used, RetryAfter: nanos(retry), ResetAfter: nanos(reset)}, true
}

func (c *logCell) giveBack(p *params, now, cost int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	c.expire(p, now)
	for cost > 0 && c.n > 0 { // the newest entries are the units just taken
		last := c.at(c.n - 1)
		d := min(cost, last.cost)
		last.cost -= d
		c.used -= d
		cost -= d
		if last.cost == 0 {
			c.n--
		}
	}
	return true
}

func (c *logCell) retire(p *params, now, idle int64, force bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	if !force && c.n > 0 && c.at(c.n-1).t+p.period > now-idle {
		return false
	}
	// The entries go with the cell: its slot stays a tombstone until the
	// next rebuild, and the ring (the bulk of a log's bytes) would stay
	// with it.
	c.dead, c.ring, c.n, c.used = true, nil, 0, 0
	return true
}

func (c *fixedCell) moveTo(dst *fixedCell) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	dst.start, dst.count = c.start, c.count
	c.start = dead
	return true
}

func (c *slidingCell) moveTo(dst *slidingCell) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == dead {
		return false
	}
	dst.start, dst.cur, dst.prev = c.start, c.cur, c.prev
	c.start = dead
	return true
}

func (c *logCell) moveTo(dst *logCell) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	// The ring is handed over, not copied: the dead cell never touches it.
	dst.used, dst.head, dst.n, dst.ring = c.used, c.head, c.n, c.ring
	c.dead, c.ring, c.n = true, nil, 0
	return true
}
