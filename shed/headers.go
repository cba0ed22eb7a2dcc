package shed

import (
	"net/http"
	"strconv"
	"time"
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
func (f *quotaFields) write(h http.Header, legacy bool, now time.Time) {
	if f.n == 0 {
		return
	}
	h[HeaderRateLimitPolicy] = append(h[HeaderRateLimitPolicy], string(f.policy))
	h[HeaderRateLimit] = append(h[HeaderRateLimit], string(f.limit))
	if legacy {
		t := &f.tightest
		var b [24]byte
		h[HeaderXRateLimitLimit] = []string{string(sfInt(b[:0], t.Limit))}
		h[HeaderXRateLimitRemaining] = []string{string(sfInt(b[:0], t.Remaining))}
		// The legacy Reset is a Unix time, as GitHub's and most others are.
		h[HeaderXRateLimitReset] = []string{string(sfInt(b[:0], now.Unix()+CeilSeconds(t.Reset)))}
	}
}
