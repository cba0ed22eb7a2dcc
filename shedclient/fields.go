package shedclient

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What the client reads of a server's answer: RateLimit and
// RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers, structured-field
// lists, RFC 9651) and Retry-After (RFC 9110: seconds or an HTTP-date).
// Every value comes from a server the client does not control, so the
// parsers take anything without panicking, and a field that is not a
// well-formed list is ignored whole, as RFC 9651 asks.

// maxFieldLen bounds a field the client parses, all its lines together;
// a longer one is ignored.
const maxFieldLen = 4096

// maxItems bounds the items read from one field, all its lines together.
const maxItems = 32

// limitItem is one RateLimit item: the policy named id (with its
// partition key pk, if any) has r units left, back within t.
type limitItem struct {
	id        string // policy name, NUL, partition key
	r, t      int64
	hasR      bool
	hasT      bool
	unitsConc bool // only in policies: qu="concurrent-requests"
}

// policyID names a policy for one partition: the name, a NUL, the key.
func policyID(name, pk string) string {
	if pk == "" {
		return name
	}
	return name + "\x00" + pk
}

// parseLimits parses the lines of a RateLimit or RateLimit-Policy field,
// appending its items to dst. Several lines are one list, as HTTP
// combines them (RFC 9110 section 5.3): a server may send each policy on
// a line of its own. A field that is not a well-formed list, in any of
// its lines, is ignored whole (RFC 9651 section 4.2), and so is one
// longer than maxFieldLen.
func parseLimits(lines []string, dst []limitItem) []limitItem {
	start, total := len(dst), 0
	for _, line := range lines {
		total += len(line)
		if total > maxFieldLen {
			return dst[:start]
		}
		var ok bool
		if dst, ok = parseList(line, dst, start+maxItems); !ok {
			return dst[:start]
		}
	}
	return dst
}

// parseList parses one line of a structured-field list of items with
// parameters, appending to dst up to a length of limit; inner lists and
// malformed input fail the whole list.
func parseList(s string, dst []limitItem, limit int) ([]limitItem, bool) {
	p := sfParser{s: s}
	p.skipSP()
	if p.done() {
		return dst, true // an empty line adds nothing to the list
	}
	for {
		it, ok := p.item()
		if !ok {
			return dst, false
		}
		if len(dst) < limit {
			dst = append(dst, it)
		}
		p.skipOWS()
		if p.done() {
			return dst, true
		}
		if p.s[p.i] != ',' {
			return dst, false
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return dst, false // a trailing comma
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// bare is a parsed bare item: kind 'i' integer, 's' string or token, 'b'
// byte sequence (decoded), '?' boolean, 'd' decimal (kept as text).
type bare struct {
	kind byte
	i    int64
	s    string
}

func (p *sfParser) item() (limitItem, bool) {
	var it limitItem
	b, ok := p.bareItem()
	if !ok || b.kind != 's' {
		return it, false // a policy is named by a string or a token
	}
	name, pk := b.s, ""
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return it, false
		}
		v := bare{kind: '?', i: 1}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return it, false
			}
		}
		switch {
		case key == "r" && v.kind == 'i':
			it.r, it.hasR = v.i, true
		case key == "t" && v.kind == 'i':
			it.t, it.hasT = v.i, true
		case key == "pk" && (v.kind == 'b' || v.kind == 's'):
			pk = v.s
		case key == "qu" && v.kind == 's':
			it.unitsConc = v.s == "concurrent-requests" || v.s == "concurrency"
		}
	}
	it.id = policyID(name, pk)
	return it, true
}

func (p *sfParser) key() (string, bool) {
	st := p.i
	if p.done() || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", false
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[st:p.i], true
}

func (p *sfParser) bareItem() (bare, bool) {
	if p.done() {
		return bare{}, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return bare{}, false
		}
		raw := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		dec, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return bare{}, false
		}
		return bare{kind: 'b', s: string(dec)}, true
	case c == '?':
		if p.i+1 >= len(p.s) || (p.s[p.i+1] != '0' && p.s[p.i+1] != '1') {
			return bare{}, false
		}
		v := int64(p.s[p.i+1] - '0')
		p.i += 2
		return bare{kind: '?', i: v}, true
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		st := p.i
		for p.i < len(p.s) && tokenChar(p.s[p.i]) {
			p.i++
		}
		return bare{kind: 's', s: p.s[st:p.i]}, true
	}
	return bare{}, false
}

func tokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// number parses an Integer (at most 15 digits) or a Decimal (kept as
// text: no field the client reads is a decimal).
func (p *sfParser) number() (bare, bool) {
	st := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	ds := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	digits := p.i - ds
	if digits == 0 {
		return bare{}, false
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		if digits > 12 {
			return bare{}, false
		}
		p.i++
		fs := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if f := p.i - fs; f == 0 || f > 3 {
			return bare{}, false
		}
		return bare{kind: 'd', s: p.s[st:p.i]}, true
	}
	if digits > 15 {
		return bare{}, false
	}
	n, err := strconv.ParseInt(p.s[st:p.i], 10, 64)
	if err != nil {
		return bare{}, false
	}
	return bare{kind: 'i', i: n}, true
}

func (p *sfParser) str() (bare, bool) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return bare{}, false
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return bare{kind: 's', s: b.String()}, true
		case c < 0x20 || c > 0x7e:
			return bare{}, false
		default:
			b.WriteByte(c)
		}
	}
	return bare{}, false // never closed
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an
// HTTP-date, as a delay from now. A date in the past is 0; a negative,
// malformed or absent value is not ok. The delay is not bounded here:
// callers cut it to their own maximum.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		if len(v) > 9 { // more than 31 years: the caller's maximum wins anyway
			return maxDuration, true
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	if d := t.Sub(now); d > 0 && d < maxDuration {
		return d, true
	}
	return maxDuration, true // Sub saturates; the year 9999 is "very long"
}

// maxDuration stands for "longer than any maximum a caller configures".
const maxDuration = 1<<63 - 1

// seconds converts a non-negative structured-field Integer of seconds to
// a Duration, saturating (t is at most 15 digits).
func seconds(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	if n > int64(maxDuration/time.Second) {
		return maxDuration
	}
	return time.Duration(n) * time.Second
}
