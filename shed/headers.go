package shed

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
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

	// The legacy headers many clients still read (HTTPConfig.LegacyHeaders).
	HeaderXRateLimitLimit     = "X-Ratelimit-Limit"
	HeaderXRateLimitRemaining = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset     = "X-Ratelimit-Reset"
)

// sfIntMax is the largest structured-field Integer (RFC 9651: 15 digits).
const sfIntMax = 999_999_999_999_999

// maxPolicyName bounds a policy name in the headers.
const maxPolicyName = 64

func sfInt(b []byte, v int64) []byte {
	if v < 0 {
		v = 0
	}
	if v > sfIntMax {
		v = sfIntMax
	}
	return strconv.AppendInt(b, v, 10)
}

// sfSeconds is d in whole seconds, rounded up, as a structured Integer.
func sfSeconds(b []byte, d time.Duration) []byte { return sfInt(b, CeilSeconds(d)) }

// appendSFString appends s as a structured-field String (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped. Bytes a String cannot hold (controls,
// non-ASCII) become '?', and long names are cut, so a layer's policy name
// can never break the field.
func appendSFString(b []byte, s string) []byte {
	if s == "" {
		s = "default"
	}
	if len(s) > maxPolicyName {
		s = s[:maxPolicyName]
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendPolicyItem appends one RateLimit-Policy item: `"name";q=100;w=60`,
// or, for a limit on requests in flight (no window),
// `"name";q=10;qu="concurrent-requests"`.
func appendPolicyItem(b []byte, q *Quota) []byte {
	b = appendSFString(b, q.Policy)
	b = append(b, ";q="...)
	b = sfInt(b, q.Limit)
	if q.Window > 0 {
		b = append(b, ";w="...)
		b = sfSeconds(b, q.Window)
	} else {
		b = append(b, `;qu="concurrent-requests"`...)
	}
	return b
}

// appendLimitItem appends one RateLimit item: `"name";r=0;t=30`. A request
// admitted above its limit (soft or elastic) is marked with the boolean
// parameter loadshed-over, prefixed with our name as the draft asks of
// implementation-specific parameters.
func appendLimitItem(b []byte, q *Quota, over bool) []byte {
	b = appendSFString(b, q.Policy)
	b = append(b, ";r="...)
	b = sfInt(b, q.Remaining)
	if q.Window > 0 || q.Reset > 0 {
		b = append(b, ";t="...)
		b = sfSeconds(b, q.Reset)
	}
	if over {
		b = append(b, ";loadshed-over"...)
	}
	return b
}

// quotaFields collects quotas into the RateLimit-Policy and RateLimit field
// values, and remembers the tightest one for the legacy headers. It is a
// value threaded through add, not a pointer, so that its buffers can stay on
// the caller's stack.
type quotaFields struct {
	policy, limit []byte
	tightest      Quota
	n             int
}

func (f quotaFields) add(q *Quota, over bool) quotaFields {
	if q.IsZero() {
		return f
	}
	if f.n > 0 {
		f.policy = append(f.policy, ", "...)
		f.limit = append(f.limit, ", "...)
	}
	f.policy = appendPolicyItem(f.policy, q)
	f.limit = appendLimitItem(f.limit, q, over)
	if f.n == 0 || q.Remaining < f.tightest.Remaining {
		f.tightest = *q
	}
	f.n++
	return f
}

// write adds the fields to h. They are added, not set, so that two shedders
// on one request (a global one and a per-route one) both tell their
// policies: several field lines of a structured list are one list.
//
// The RateLimit-Policy value comes from policies (nil: built afresh), and
// the RateLimit value and both []string the header map keeps share one
// allocation (fieldValues); with legacy, the three X-RateLimit-* values
// share another.
func (f *quotaFields) write(h http.Header, legacy bool, now time.Time, policies *policyCache) {
	if f.n == 0 {
		return
	}
	policy := policies.intern(f.policy)
	var pv, lv []string
	if len(f.limit) <= len(fieldValues{}.buf) {
		v := new(fieldValues)
		v.vals[0] = v.str(f.limit)
		v.vals[1] = policy
		lv, pv = v.vals[0:1:1], v.vals[1:2:2]
	} else {
		lv, pv = []string{string(f.limit)}, []string{policy}
	}
	h[HeaderRateLimitPolicy] = addValue(h[HeaderRateLimitPolicy], pv)
	h[HeaderRateLimit] = addValue(h[HeaderRateLimit], lv)
	if legacy {
		t := &f.tightest
		v := new(legacyValues)
		v.vals[0] = v.str(sfInt(v.buf[:0], t.Limit))
		v.vals[1] = v.str(sfInt(v.buf[v.n:v.n], t.Remaining))
		// The legacy Reset is a Unix time, as GitHub's and most others are.
		v.vals[2] = v.str(sfInt(v.buf[v.n:v.n], now.Unix()+CeilSeconds(t.Reset)))
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

// str returns b, appended at v.buf[v.n:], as a string, and marks its bytes
// used (never written again). Should b not fit (it always does), it is
// copied out instead.
func (v *legacyValues) str(b []byte) string {
	n := copy(v.buf[v.n:], b)
	if n == 0 || n < len(b) {
		return string(b)
	}
	s := unsafe.String(&v.buf[v.n], n)
	v.n += n
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
