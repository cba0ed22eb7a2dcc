package shedhttp

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/shed"
)

// Problem types (RFC 9457) for rejections, as
// draft-ietf-httpapi-ratelimit-headers defines them.
const (
	// ProblemQuotaExceeded: the client went over one or more of its quota
	// policies (a 429).
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemReducedCapacity: the service cannot take the request now
	// because it is shedding load (a 503).
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

const (
	titleQuotaExceeded   = "Request cannot be satisfied as assigned quota has been exceeded"
	titleReducedCapacity = "Request cannot be satisfied due to temporary server capacity constraints"
)

// ProblemContentType is the media type of a problem document (RFC 9457).
const ProblemContentType = "application/problem+json"

var problemBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// WriteRejection answers a rejected request the way the middleware does
// unless Config.OnReject says otherwise: the rejection's status (429 or
// 503), Retry-After in whole seconds rounded up, the RateLimit-Policy and
// RateLimit fields of the violated policies, and a problem document (RFC
// 9457) whose "violated-policies" member names them. It writes only the
// rejection's client-safe fields, never an internal error's text. Use it
// from an OnReject that logs, counts or adds headers of its own first.
func WriteRejection(w http.ResponseWriter, rej *shed.Rejection) {
	writeRejection(w, rej, false, 0, time.Time{}, &rejectionPolicies)
}

// rejectionPolicies caches the RateLimit-Policy values of WriteRejection
// called on its own (from an OnReject).
var rejectionPolicies policyCache

func writeRejection(w http.ResponseWriter, rej *shed.Rejection, legacy bool, show fieldFilter, now time.Time, policies *policyCache) {
	h := w.Header()
	pv := new(problemValues)
	if s := rej.RetryAfterSeconds(); s > 0 {
		pv.vals[4] = pv.str(strconv.AppendInt(pv.buf[pv.n:pv.n], s, 10))
		h[HeaderRetryAfter] = pv.vals[4:5:5]
	}
	var pb, lb [256]byte
	policy, limit := pb[:0], lb[:0]
	var t tightest
	var sb [4]shed.Quota
	violated := sb[:0]
	for i := range rej.Policies {
		q := rej.Policies[i]
		if !shown(&q, show) {
			continue
		}
		q = ratefield.CutReset(q, rej.RetryAfter)
		policy, limit = appendQuota(policy, limit, &q, false)
		t.see(&q)
		violated = append(violated, rej.Policies[i])
	}
	writeQuotaFields(h, policy, limit, &t, legacy, now, policies)
	status := rej.Status
	if status < 400 || status > 599 {
		status = http.StatusServiceUnavailable
	}
	writeProblemValues(w, status, rej.Reason, violated, pv)
}

// writeProblem writes a problem document for status. detail must be
// client-safe; it is escaped.
func writeProblem(w http.ResponseWriter, status int, detail string, policies []shed.Quota) {
	writeProblemValues(w, status, detail, policies, new(problemValues))
}

// problemValues is a problem answer's header values as the header map
// holds them (Content-Type, Content-Length, Cache-Control,
// X-Content-Type-Options, Retry-After) and the bytes of the two that are
// formatted, in one allocation instead of up to seven. Never pooled, for
// the reason fieldValues is not.
type problemValues struct {
	vals [5]string
	buf  [40]byte
	n    int
}

// str returns b, appended at v.buf[v.n:], as a string (see appendStable).
func (v *problemValues) str(b []byte) string { return appendStable(v.buf[:], &v.n, b) }

func writeProblemValues(w http.ResponseWriter, status int, detail string, policies []shed.Quota, pv *problemValues) {
	if detail == "" {
		detail = http.StatusText(status)
	}
	var body []byte
	var bp *[]byte
	if d := cachedProblem(status, detail, policies); d != nil {
		body, pv.vals[1] = d.body, d.length
	} else {
		bp = problemBufs.Get().(*[]byte)
		body = appendProblem((*bp)[:0], status, detail, policies)
		pv.vals[1] = pv.str(strconv.AppendInt(pv.buf[pv.n:pv.n], int64(len(body)), 10))
	}
	h := w.Header()
	pv.vals[0], pv.vals[2], pv.vals[3] = ProblemContentType, "no-store", "nosniff"
	h["Content-Type"] = pv.vals[0:1:1]
	h["Content-Length"] = pv.vals[1:2:2]
	h["Cache-Control"] = pv.vals[2:3:3]
	h["X-Content-Type-Options"] = pv.vals[3:4:4]
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if bp != nil && cap(body) <= 4096 {
		*bp = body
		problemBufs.Put(bp)
	}
}

// appendProblem appends the problem document of status, detail and the
// violated policies to b.
func appendProblem(b []byte, status int, detail string, policies []shed.Quota) []byte {
	typ, title := "about:blank", http.StatusText(status)
	switch status {
	case http.StatusTooManyRequests:
		typ, title = ProblemQuotaExceeded, titleQuotaExceeded
	case http.StatusServiceUnavailable:
		typ, title = ProblemReducedCapacity, titleReducedCapacity
	}
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, detail)
	if len(policies) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i := range policies {
			if i > 0 {
				b = append(b, ',')
			}
			name := policies[i].Policy
			if name == "" {
				name = "default"
			}
			if len(name) > ratefield.MaxPolicyName {
				name = name[:ratefield.MaxPolicyName]
			}
			b = appendJSONString(b, name)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// A problemDoc is a problem document that names no policy, built once:
// a layer that sheds load answers thousands of requests a second with the
// same few (status, reason) pairs, and under a flood every microsecond a
// refusal costs is taken from the requests being served.
type problemDoc struct {
	status int
	detail string
	body   []byte // never written to once published
	length string
}

// problemDocs holds the documents of the first (status, detail) pairs
// seen. It is small and never evicts, so a layer whose reasons vary (a
// number in the text) fills it and is then answered as before, built per
// request; the usual reasons are the few the layers name.
var problemDocs [16]atomic.Pointer[problemDoc]

// cachedProblem returns the document of status and detail when it names no
// policy, building and keeping it on first use; nil when it names policies
// or the cache is full.
func cachedProblem(status int, detail string, policies []shed.Quota) *problemDoc {
	if len(policies) > 0 {
		return nil
	}
	for i := range problemDocs {
		d := problemDocs[i].Load()
		if d == nil {
			body := appendProblem(nil, status, detail, nil)
			d = &problemDoc{status: status, detail: strings.Clone(detail), body: body, length: strconv.Itoa(len(body))}
			if problemDocs[i].CompareAndSwap(nil, d) {
				return d
			}
			d = problemDocs[i].Load() // another request filled it first
		}
		if d.status == status && d.detail == detail {
			return d
		}
	}
	return nil
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD
// and '<', '>', '&' are escaped as encoding/json does, so the document is
// valid JSON whatever a layer put in it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
