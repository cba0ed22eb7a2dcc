package shedclient

import (
	"sync"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// buckets is how many slices a window is counted in: the window slides by
// a tenth of itself.
const buckets = 10

// Bounds on what one destination remembers, so that a server naming a
// fresh policy on every answer cannot grow the client without limit.
const (
	maxScopes          = 1024
	maxPoliciesInScope = 16
	maxBlocked         = 1024
)

type bucket struct {
	epoch   int64
	req     [shed.NumPriorities]int64
	acc     [shed.NumPriorities]int64
	sent    int64 // first attempts
	retries int64
}

// dest is what the client knows of one destination.
type dest struct {
	name  string
	width time.Duration // of a bucket
	mu    sync.Mutex
	ring  [buckets]bucket
	// blocked holds, per policy id, until when the server said it is spent.
	blocked map[string]time.Time
	// scopes holds, per scope (a gRPC method, an HTTP host), the policy
	// ids the server said apply to it. A client cannot tell which
	// partition its next request falls in, so a spent partition holds
	// back its whole scope: a client shared by several users whose
	// quotas are partitioned should give each a scope of its own
	// (Config.HTTPScope).
	scopes map[string][]string
}

func newDest(name string, window time.Duration) *dest {
	w := window / buckets
	if w <= 0 {
		w = 1
	}
	return &dest{name: name, width: w, blocked: make(map[string]time.Time), scopes: make(map[string][]string)}
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

// scopeWide is the id under which a 429's Retry-After blocks a whole
// scope when the server named no policy.
func scopeWide(scope string) string { return "\x01" + scope }

// spent returns the policy of scope that is spent the longest, and until
// when; a zero time when none is.
func (d *dest) spent(scope string, now time.Time) (string, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.blocked) == 0 {
		return "", time.Time{}
	}
	var id string
	var until time.Time
	check := func(p string) {
		u, ok := d.blocked[p]
		if !ok {
			return
		}
		if !u.After(now) {
			delete(d.blocked, p)
			return
		}
		if u.After(until) {
			id, until = p, u
		}
	}
	check(scopeWide(scope))
	for _, p := range d.scopes[scope] {
		check(p)
	}
	if id == scopeWide(scope) {
		id = "retry-after"
	}
	return id, until
}

// learn remembers what an answer said of the policies of scope.
func (d *dest) learn(scope string, a *answer, now time.Time, maxBlock time.Duration) {
	if len(a.limits) == 0 && len(a.policies) == 0 && !(a.rejected && a.quota && a.hasRetry) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range a.policies {
		d.addToScope(scope, a.policies[i].id)
	}
	blockedAny := false
	for i := range a.limits {
		it := &a.limits[i]
		d.addToScope(scope, it.id)
		switch {
		case it.hasR && it.r <= 0 && it.hasT && it.t > 0:
			d.block(it.id, now.Add(min(seconds(it.t), maxBlock)))
			blockedAny = true
		case it.hasR && it.r > 0:
			delete(d.blocked, it.id)
		}
	}
	if a.rejected && a.quota && a.hasRetry && !blockedAny && a.retryAfter > 0 {
		d.block(scopeWide(scope), now.Add(min(a.retryAfter, maxBlock)))
	}
}

func (d *dest) block(id string, until time.Time) {
	if _, ok := d.blocked[id]; !ok && len(d.blocked) >= maxBlocked {
		return
	}
	d.blocked[id] = until
}

func (d *dest) addToScope(scope, id string) {
	ids, ok := d.scopes[scope]
	if !ok && len(d.scopes) >= maxScopes {
		return
	}
	for _, p := range ids {
		if p == id {
			return
		}
	}
	if len(ids) >= maxPoliciesInScope {
		return
	}
	d.scopes[scope] = append(ids, id)
}
