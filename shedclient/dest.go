package shedclient

import (
	"strings"
	"sync"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// buckets is how many slices a window is counted in: the window slides by
// a tenth of itself.
const buckets = 10

// maxPoliciesInScope bounds the policies one scope is told of; past it,
// the scope keeps those it was told of last.
const maxPoliciesInScope = 16

type bucket struct {
	epoch   int64
	req     [shed.NumPriorities]int64
	acc     [shed.NumPriorities]int64
	sent    int64 // first attempts
	retries int64
}

// dest is what the client knows of one destination.
type dest struct {
	memo  // Client.mu guards it, scopes and spent
	name  string
	width time.Duration // of a bucket
	mu    sync.Mutex    // guards ring
	ring  [buckets]bucket
	// scopes holds, per scope (a gRPC method, an HTTP host and what
	// Config.HTTPScope names), the policies the server said apply to it.
	// A client cannot tell which partition its next request falls in, so
	// a spent partition holds back its whole scope: a client shared by
	// several users whose quotas are partitioned should give each a
	// scope of its own (Config.HTTPScope).
	scopes map[string]*scope
	// spent holds, per policy id, until when the server said it is spent.
	spent map[string]*spentPolicy
}

// scope is what the client knows of one scope of a destination.
type scope struct {
	memo
	d   *dest
	key string
	// ids are the policies the scope was told of, oldest first.
	ids []string
	// wideUntil is when a 429's Retry-After that named no policy ends.
	wideUntil time.Time
}

// spentPolicy is a policy of a destination the server said is spent.
type spentPolicy struct {
	memo
	d     *dest
	id    string
	until time.Time
}

func newDest(name string, window time.Duration) *dest {
	w := window / buckets
	if w <= 0 {
		w = 1
	}
	return &dest{name: name, width: w, scopes: make(map[string]*scope), spent: make(map[string]*spentPolicy)}
}

func (d *dest) forget(c *Client) {
	for _, sc := range d.scopes {
		c.mem.remove(&sc.memo)
	}
	for _, sp := range d.spent {
		c.mem.remove(&sp.memo)
	}
	d.scopes, d.spent = nil, nil
	if c.dests[d.name] == d {
		delete(c.dests, d.name)
	}
	c.mem.remove(&d.memo)
}

func (sc *scope) forget(c *Client) {
	delete(sc.d.scopes, sc.key)
	c.mem.remove(&sc.memo)
}

func (sp *spentPolicy) forget(c *Client) {
	delete(sp.d.spent, sp.id)
	c.mem.remove(&sp.memo)
}

func (d *dest) epoch(now time.Time) int64 { return now.UnixNano() / int64(d.width) }

// cur returns the bucket of now, emptied if it held an older slice.
// d.mu is held.
func (d *dest) cur(now time.Time) *bucket {
	e := d.epoch(now)
	b := &d.ring[uint64(e)%buckets]
	if b.epoch != e {
		*b = bucket{epoch: e}
	}
	return b
}

// each calls f for every bucket within the window ending now. d.mu is held.
func (d *dest) each(now time.Time, f func(*bucket)) {
	e := d.epoch(now)
	for i := range d.ring {
		if b := &d.ring[i]; b.epoch > e-buckets && b.epoch <= e {
			f(b)
		}
	}
}

// count records a request of priority p, accepted or not.
func (d *dest) count(p shed.Priority, now time.Time, accepted bool) {
	i := p.Index()
	d.mu.Lock()
	b := d.cur(now)
	b.req[i]++
	if accepted {
		b.acc[i]++
	}
	d.mu.Unlock()
}

// attempt records an attempt sent: a first one, or a retry.
func (d *dest) attempt(now time.Time, retry bool) {
	d.mu.Lock()
	b := d.cur(now)
	if retry {
		b.retries++
	} else {
		b.sent++
	}
	d.mu.Unlock()
}

// rejectProbability is the SRE book's client-side throttling for
// priority p: max(0, (requests − K·accepts) / (requests + 1)).
func (d *dest) rejectProbability(p shed.Priority, now time.Time, k float64) float64 {
	i := p.Index()
	var req, acc int64
	d.mu.Lock()
	d.each(now, func(b *bucket) { req += b.req[i]; acc += b.acc[i] })
	d.mu.Unlock()
	r := (float64(req) - k*float64(acc)) / float64(req+1)
	if r < 0 {
		return 0
	}
	return r
}

// allowRetry takes a retry from the budget when retries stay within
// ratio of the requests sent over the window.
func (d *dest) allowRetry(now time.Time, ratio float64) bool {
	var sent, retries int64
	d.mu.Lock()
	defer d.mu.Unlock()
	d.each(now, func(b *bucket) { sent += b.sent; retries += b.retries })
	return float64(retries+1) <= ratio*float64(sent)
}

// spent returns the policy of scope that is spent the longest, and until
// when; a zero time when none is.
func (c *Client) spent(d *dest, key string, now time.Time) (string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := d.scopes[key]
	if sc == nil {
		return "", time.Time{}
	}
	var id string
	var until time.Time
	if !sc.wideUntil.IsZero() {
		if sc.wideUntil.After(now) {
			id, until = "retry-after", sc.wideUntil
		} else {
			sc.wideUntil = time.Time{}
		}
	}
	if len(d.spent) > 0 {
		for _, p := range sc.ids {
			sp := d.spent[p]
			if sp == nil {
				continue
			}
			if !sp.until.After(now) {
				sp.forget(c)
				continue
			}
			c.mem.touch(&sp.memo)
			if sp.until.After(until) {
				id, until = p, sp.until
			}
		}
	}
	c.mem.touch(&sc.memo)
	c.mem.touch(&d.memo)
	return id, until
}

// isSpent reports whether a RateLimit item says its policy is spent.
func isSpent(it *limitItem) bool { return it.hasR && it.r <= 0 && it.hasT && it.t > 0 }

// learn remembers what an answer said of the policies of the scope key.
func (c *Client) learn(d *dest, key string, a *answer, now time.Time) {
	if len(a.limits) == 0 && len(a.policies) == 0 && !(a.rejected && a.quota && a.hasRetry) {
		return
	}
	maxBlock := c.cfg.MaxBlock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !d.listed() {
		return // forgotten while the request was under way
	}
	sc := c.scope(d, key)
	for i := range a.policies {
		c.tell(sc, a.policies[i].id)
	}
	// Spent policies are told last, so that a scope told of more than
	// maxPoliciesInScope keeps them.
	for i := range a.limits {
		it := &a.limits[i]
		if it.hasR && it.r > 0 {
			if sp := d.spent[it.id]; sp != nil {
				sp.forget(c)
			}
		}
		if !isSpent(it) {
			c.tell(sc, it.id)
		}
	}
	blockedAny := false
	for i := range a.limits {
		if it := &a.limits[i]; isSpent(it) {
			c.block(d, c.tell(sc, it.id), now.Add(min(seconds(it.t), maxBlock)))
			blockedAny = true
		}
	}
	if a.rejected && a.quota && a.hasRetry && !blockedAny && a.retryAfter > 0 {
		sc.wideUntil = now.Add(min(a.retryAfter, maxBlock))
	}
	c.mem.touch(&sc.memo)
	c.mem.touch(&d.memo)
	c.trim()
}

// scope returns what d remembers of the scope key, a new scope if
// nothing. c.mu is held.
func (c *Client) scope(d *dest, key string) *scope {
	sc := d.scopes[key]
	if sc == nil {
		key = strings.Clone(key)
		sc = &scope{d: d, key: key}
		d.scopes[key] = sc
		c.mem.add(&sc.memo, sc, sc.bytes())
	}
	return sc
}

// tell adds the policy id to those sc was told of, and returns the copy
// sc keeps. c.mu is held.
func (c *Client) tell(sc *scope, id string) string {
	for _, p := range sc.ids {
		if p == id {
			return p
		}
	}
	id = strings.Clone(id) // not the header line it was parsed from
	if len(sc.ids) < maxPoliciesInScope {
		sc.ids = append(sc.ids, id)
	} else {
		copy(sc.ids, sc.ids[1:])
		sc.ids[len(sc.ids)-1] = id
	}
	c.mem.resize(&sc.memo, sc.bytes())
	return id
}

// block remembers that the policy id of d is spent until then. c.mu is
// held.
func (c *Client) block(d *dest, id string, until time.Time) {
	if sp := d.spent[id]; sp != nil {
		sp.until = until
		c.mem.touch(&sp.memo)
		return
	}
	sp := &spentPolicy{d: d, id: id, until: until}
	d.spent[id] = sp
	c.mem.add(&sp.memo, sp, spentBytes(id))
}
