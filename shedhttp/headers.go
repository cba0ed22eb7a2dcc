package shedhttp

import (
	"hash/maphash"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/internal/ratefield"
)

// Response header names, in canonical form so that they are set without
// canonicalizing (and allocating) on every request.
const (
	// HeaderRateLimitPolicy is draft-ietf-httpapi-ratelimit-headers'
	// RateLimit-Policy field: the quota policies, as a structured-field list
	// (`"per-key";q=100;w=60`).
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	// HeaderRateLimit is the draft's RateLimit field: what is left of each
	// policy (`"per-key";r=0;t=30`).
	HeaderRateLimit = "Ratelimit"
	// HeaderRetryAfter is Retry-After (RFC 9110), in whole seconds.
	HeaderRetryAfter = "Retry-After"

	// The legacy headers many clients still read (Config.LegacyHeaders).
	HeaderXRateLimitLimit     = "X-Ratelimit-Limit"
	HeaderXRateLimitRemaining = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset     = "X-Ratelimit-Reset"
)

// appendQuota appends q's items to the RateLimit-Policy and RateLimit
// values being built, after a ", " when they already hold one. The buffers
// are passed in and returned, not kept in a struct behind a pointer, so
// that the callers' stack arrays stay on the stack.
func appendQuota(policy, limit []byte, q *shed.Quota, over bool) ([]byte, []byte) {
	return ratefield.AppendQuota(policy, limit, q, over)
}

// tightest remembers, for the legacy headers, the quota with the fewest
// units remaining (the first of equals). The X-RateLimit-* headers describe
// a rate limit, so a quota with a window wins over any without one (a limit
// on requests in flight, whose "reset" would only ever be now); those count
// only when no quota has a window.
type tightest struct {
	limit, remaining int64
	reset            time.Duration
	windowed, set    bool
}

func (t *tightest) see(q *shed.Quota) {
	w := q.Window > 0
	if !t.set || (w && !t.windowed) || (w == t.windowed && q.Remaining < t.remaining) {
		*t = tightest{limit: q.Limit, remaining: q.Remaining, reset: q.Reset, windowed: w, set: true}
	}
}

// writeQuotaFields adds the RateLimit-Policy and RateLimit values built by
// appendQuota (nothing when they are empty) to h, and with legacy the
// X-RateLimit-* values of t. They are added, not set, so that two shedders
// on one request (a global one and a per-route one) both tell their
// policies: several field lines of a structured list are one list.
//
// The RateLimit-Policy value comes from policies (nil: built afresh), and
// the RateLimit value and both []string the header map keeps share one
// allocation (fieldValues); with legacy, the three X-RateLimit-* values
// share another.
func writeQuotaFields(h http.Header, policy, limit []byte, t *tightest, legacy bool, now time.Time, policies *policyCache) {
	if len(policy) == 0 {
		return
	}
	ps := policies.intern(policy)
	var pv, lv []string
	if len(limit) <= len(fieldValues{}.buf) {
		v := new(fieldValues)
		v.vals[0] = v.str(limit)
		v.vals[1] = ps
		lv, pv = v.vals[0:1:1], v.vals[1:2:2]
	} else {
		lv, pv = []string{string(limit)}, []string{ps}
	}
	setQuotaFields(h, pv, lv, t, legacy, now)
}

// setQuotaFields adds the one-value slices pv (RateLimit-Policy) and lv
// (RateLimit) to h, and with legacy the X-RateLimit-* values of t.
func setQuotaFields(h http.Header, pv, lv []string, t *tightest, legacy bool, now time.Time) {
	if len(h) == 0 {
		// A fresh response's map: nothing to add to.
		h[HeaderRateLimitPolicy], h[HeaderRateLimit] = pv, lv
	} else {
		h[HeaderRateLimitPolicy] = addValue(h[HeaderRateLimitPolicy], pv)
		h[HeaderRateLimit] = addValue(h[HeaderRateLimit], lv)
	}
	if legacy {
		v := new(legacyValues)
		v.vals[0] = v.str(ratefield.AppendInt(v.buf[:0], t.limit))
		v.vals[1] = v.str(ratefield.AppendInt(v.buf[v.n:v.n], t.remaining))
		// The legacy Reset is a Unix time, as GitHub's and most others are.
		v.vals[2] = v.str(ratefield.AppendInt(v.buf[v.n:v.n], now.Unix()+ratefield.CeilSeconds(t.reset)))
		h[HeaderXRateLimitLimit] = v.vals[0:1:1]
		h[HeaderXRateLimitRemaining] = v.vals[1:2:2]
		h[HeaderXRateLimitReset] = v.vals[2:3:3]
	}
}

// addValue appends the one value of v to old, handing the header map v
// itself when old is empty (the common case) instead of a new slice.
func addValue(old, v []string) []string {
	if len(old) == 0 {
		return v
	}
	return append(old, v[0])
}

// fieldValues is one response's RateLimit and RateLimit-Policy values as
// the header map holds them: the []string values and the bytes of the
// RateLimit string, in one allocation instead of four. It is allocated per
// response, never pooled: the header map may be read after the handler
// returns (net/http writes the header of a handler that wrote nothing only
// then, and wrappers such as http.TimeoutHandler copy the map's slices
// later still), so nothing the map holds may be reused. Each value slice
// has a capacity of one, so that an Add to the header reallocates instead
// of writing over the neighbouring value.
type fieldValues struct {
	vals [2]string
	buf  [64]byte
}

// limitString returns RateLimit's value built by b, appended at
// v.buf[:0]: the bytes are in v.buf unless they did not fit.
func (v *fieldValues) limitString(b []byte) string {
	if len(b) == 0 || len(b) > len(v.buf) || &b[0] != &v.buf[0] {
		return string(b)
	}
	return unsafe.String(&v.buf[0], len(b))
}

// str copies b (at most len(v.buf) bytes) into v.buf and returns it as a
// string. The bytes are never written again once v is handed out, so the
// string stays immutable, as unsafe.String requires.
func (v *fieldValues) str(b []byte) string {
	n := copy(v.buf[:], b)
	if n == 0 {
		return ""
	}
	return unsafe.String(&v.buf[0], n)
}

// legacyValues is fieldValues for the three X-RateLimit-* values: each is
// an sfInt (at most 15 digits) appended in turn to buf, n bytes used so far.
type legacyValues struct {
	vals [3]string
	buf  [3 * 15]byte
	n    int
}

// str returns b, appended at v.buf[v.n:], as a string (see appendStable).
func (v *legacyValues) str(b []byte) string { return appendStable(v.buf[:], &v.n, b) }

// appendStable copies b into buf[*used:], marks those bytes used and
// returns them as a string: they are never written again, so the string
// stays immutable, as unsafe.String requires. Should b not fit (the callers
// size buf so that it always does), it is copied out instead.
func appendStable(buf []byte, used *int, b []byte) string {
	n := copy(buf[*used:], b)
	if n == 0 || n < len(b) {
		return string(b)
	}
	s := unsafe.String(&buf[*used], n)
	*used += n
	return s
}

// maxCachedPolicies bounds a policyCache: layers have a handful of
// policies, so more distinct values means names that vary per request,
// which are then built afresh instead of filling memory.
const maxCachedPolicies = 64

// maxCachedPolicyLen bounds the length of a cached RateLimit-Policy value.
const maxCachedPolicyLen = 512

// policyCache interns RateLimit-Policy values. The value depends only on
// the policies' names, quotas and windows, which are few and fixed, while
// RateLimit's changes on every request: a warm cache answers without
// allocating. Readers never lock: the map is immutable, replaced whole
// (copy on write) under mu when a value is added.
type policyCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

// intern returns b as a string, the cached one when there is one.
func (c *policyCache) intern(b []byte) string {
	if c == nil {
		return string(b)
	}
	if m := c.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	return c.add(b)
}

func (c *policyCache) add(b []byte) string {
	s := string(b)
	if len(s) > maxCachedPolicyLen {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		if v, ok := (*old)[s]; ok {
			return v
		}
		n = len(*old)
	}
	if n >= maxCachedPolicies {
		return s
	}
	next := make(map[string]string, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[s] = s
	c.m.Store(&next)
	return s
}

// maxCachedPolicySets bounds a policySets: a chain's layers report a
// handful of policy sets; more means names that vary per request, whose
// fields are then built afresh.
const maxCachedPolicySets = 64

// policySets caches, per distinct set of quota policies (each lease's
// name, quota and window, in lease order), the RateLimit-Policy value and
// the unchanging beginning of each RateLimit item, so that an admitted
// request builds only the remaining units and reset times. It is found by
// a hash of the leases' quotas, checked against the entry: a collision is
// a miss. Readers never lock: the map is immutable, replaced whole (copy
// on write) under mu when a set is added.
type policySets struct {
	seed maphash.Seed
	// last is the set found last: most requests through one chain carry
	// the same set, which is then found without hashing.
	last atomic.Pointer[policySet]
	mu   sync.Mutex
	m    atomic.Pointer[map[uint64]*policySet]
	// show is which quotas go into the fields (Config.DiscloseCapacity,
	// Config.ShowDryRun).
	show fieldFilter
}

// policySet is one cached set; immutable once published.
type policySet struct {
	keys   []policyKey
	policy string   // the RateLimit-Policy value
	starts []string // appendLimitStart of each quota, in order
	// show is the owning policySets' show.
	show fieldFilter
}

// policyKey is what a RateLimit-Policy item depends on.
type policyKey struct {
	name   string
	limit  int64
	window time.Duration
}

func newPolicySets(show fieldFilter) *policySets {
	return &policySets{seed: maphash.MakeSeed(), show: show}
}

// fieldFilter says which quotas, beyond the client's enforced ones, go
// into the fields clients see.
type fieldFilter uint8

const (
	// showService: the service's own capacity (Config.DiscloseCapacity).
	showService fieldFilter = 1 << iota
	// showDryRun: limits in dry run (Config.ShowDryRun).
	showDryRun
)

func newFieldFilter(disclose, dryRun bool) fieldFilter {
	var f fieldFilter
	if disclose {
		f |= showService
	}
	if dryRun {
		f |= showDryRun
	}
	return f
}

// shown reports whether q goes into the fields clients see: a quota, not
// the service's own capacity unless Config.DiscloseCapacity says so, and
// not a limit in dry run (nobody enforces it) unless Config.ShowDryRun does.
func shown(q *shed.Quota, f fieldFilter) bool {
	return !q.IsZero() && (f&showService != 0 || !q.Service) && (f&showDryRun != 0 || !q.DryRun)
}

// lookup returns the set of the leases' quotas (at least one is not
// zero), or nil when it is not cached and the cache is full.
func (c *policySets) lookup(leases []shed.Lease) *policySet {
	if s := c.last.Load(); s != nil && s.matches(leases) {
		return s
	}
	s := c.find(leases)
	// Requests that alternate between sets would otherwise write last on
	// every request, bouncing its cache line between cores: it follows
	// the traffic one miss in 16 (and at once when empty).
	if s != nil && (rand.Uint32()&15 == 0 || c.last.Load() == nil) {
		c.last.Store(s)
	}
	return s
}

func (c *policySets) find(leases []shed.Lease) *policySet {
	var h uint64
	for i := range leases {
		if q := &leases[i].Quota; shown(q, c.show) {
			h = (h ^ maphash.String(c.seed, q.Policy) ^ uint64(q.Limit)*0x9e3779b97f4a7c15 ^ uint64(q.Window)*0xc2b2ae3d27d4eb4f) * 0x100000001b3
		}
	}
	if m := c.m.Load(); m != nil {
		if s := (*m)[h]; s != nil && s.matches(leases) {
			return s
		}
	}
	return c.add(h, leases)
}

func (s *policySet) matches(leases []shed.Lease) bool {
	j := 0
	for i := range leases {
		q := &leases[i].Quota
		if !shown(q, s.show) {
			continue
		}
		if j == len(s.keys) {
			return false
		}
		if k := &s.keys[j]; k.name != q.Policy || k.limit != q.Limit || k.window != q.Window {
			return false
		}
		j++
	}
	return j == len(s.keys)
}

func (c *policySets) add(h uint64, leases []shed.Lease) *policySet {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		if s := (*old)[h]; s != nil {
			if s.matches(leases) {
				return s
			}
			return nil // a collision: the first set keeps the slot
		}
		n = len(*old)
	}
	if n >= maxCachedPolicySets {
		return nil
	}
	s := &policySet{show: c.show}
	var policy []byte
	for i := range leases {
		q := &leases[i].Quota
		if !shown(q, c.show) {
			continue
		}
		if len(s.keys) > 0 {
			policy = append(policy, ", "...)
		}
		policy = ratefield.AppendPolicyItem(policy, q)
		s.keys = append(s.keys, policyKey{q.Policy, q.Limit, q.Window})
		s.starts = append(s.starts, string(ratefield.AppendLimitStart(nil, q)))
	}
	s.policy = string(policy)
	next := make(map[uint64]*policySet, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[h] = s
	c.m.Store(&next)
	return s
}
