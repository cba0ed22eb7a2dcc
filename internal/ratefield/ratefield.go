// Package ratefield writes the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers for the front ends: the HTTP
// middleware puts them in response headers, the gRPC interceptors in
// trailing metadata, and both must spell them the same way.
package ratefield

import (
	"strconv"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// IntMax is the largest structured-field Integer (RFC 9651: 15 digits).
const IntMax = 999_999_999_999_999

// MaxPolicyName bounds a policy name in the headers.
const MaxPolicyName = 64

// AppendInt appends v as a structured-field Integer, clamped to [0, IntMax].
func AppendInt(b []byte, v int64) []byte {
	if v < 0 {
		v = 0
	}
	if v > IntMax {
		v = IntMax
	}
	return strconv.AppendInt(b, v, 10)
}

// AppendSeconds appends d in whole seconds, rounded up, as a structured Integer.
func AppendSeconds(b []byte, d time.Duration) []byte { return AppendInt(b, CeilSeconds(d)) }

// CeilSeconds rounds d up to whole seconds, as the fields and Retry-After
// count them; negative durations give 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AppendString appends s as a structured-field String (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped. Bytes a String cannot hold (controls,
// non-ASCII) become '?', and long names are cut, so a layer's policy name
// can never break the field.
func AppendString(b []byte, s string) []byte {
	if s == "" {
		s = "default"
	}
	if len(s) > MaxPolicyName {
		s = s[:MaxPolicyName]
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

// AppendPolicyItem appends one RateLimit-Policy item: `"name";q=100;w=60`,
// or, for a limit on requests in flight (no window),
// `"name";q=10;qu="concurrent-requests"`.
func AppendPolicyItem(b []byte, q *shed.Quota) []byte {
	b = AppendString(b, q.Policy)
	b = append(b, ";q="...)
	b = AppendInt(b, q.Limit)
	if q.Window > 0 {
		b = append(b, ";w="...)
		b = AppendSeconds(b, q.Window)
	} else {
		b = append(b, `;qu="concurrent-requests"`...)
	}
	return b
}

// AppendLimitItem appends one RateLimit item: `"name";r=0;t=30`. A request
// admitted above its limit (soft or elastic) is marked with the boolean
// parameter loadshed-over, prefixed with our name as the draft asks of
// implementation-specific parameters.
func AppendLimitItem(b []byte, q *shed.Quota, over bool) []byte {
	return AppendLimitRest(AppendLimitStart(b, q), q, over)
}

// AppendLimitStart appends the part of a RateLimit item that does not
// change from request to request: `"name";r=`.
func AppendLimitStart(b []byte, q *shed.Quota) []byte {
	return append(AppendString(b, q.Policy), ";r="...)
}

// AppendLimitRest appends the rest: `0;t=30`.
func AppendLimitRest(b []byte, q *shed.Quota, over bool) []byte {
	b = AppendInt(b, q.Remaining)
	if q.Window > 0 || q.Reset > 0 {
		b = append(b, ";t="...)
		b = AppendSeconds(b, q.Reset)
	}
	if over {
		b = append(b, ";loadshed-over"...)
	}
	return b
}

// AppendQuota appends q's items to the RateLimit-Policy and RateLimit
// values being built, after a ", " when they already hold one.
func AppendQuota(policy, limit []byte, q *shed.Quota, over bool) ([]byte, []byte) {
	if len(policy) > 0 {
		policy = append(policy, ", "...)
		limit = append(limit, ", "...)
	}
	return AppendPolicyItem(policy, q), AppendLimitItem(limit, q, over)
}

// Shown reports whether q goes into the fields clients see: a quota, not
// the service's own capacity unless disclose says so, and never a limit in
// dry run (nobody enforces it, and a client honouring it would slow down
// for nothing).
func Shown(q *shed.Quota, disclose bool) bool {
	return !q.IsZero() && (disclose || !q.Service) && !q.DryRun
}

// CutReset returns a violated policy as clients are told of it. The draft
// asks that Retry-After not point before the end of the effective window
// (t): a client told r=0 for t seconds should not be told to come back
// sooner. Units may come back before the whole quota does, so t is cut to
// the retry time, not the reverse.
func CutReset(q shed.Quota, retryAfter time.Duration) shed.Quota {
	if retryAfter > 0 && q.Reset > retryAfter {
		q.Reset = retryAfter
	}
	return q
}

// ValidPolicyName reports whether s may name a policy (a rate limit rule,
// or a layer): 1 to 64 letters, digits, '-', '_' or '.', so that it can
// label metrics and stand in a RateLimit-Policy field as it is.
// ratelimit checks its rules' names with it, and config checks a file's
// before building.
func ValidPolicyName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
