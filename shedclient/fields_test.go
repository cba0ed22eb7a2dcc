package shedclient

import (
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/shed"
)

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []limitItem
	}{
		{`"per-key";r=0;t=30`, []limitItem{{id: "per-key", r: 0, t: 30, hasR: true, hasT: true}}},
		{`default;r=5, "b";r=0;t=2;pk=:dXNlcjE=:`, []limitItem{{id: "default", r: 5, hasR: true}, {id: "b\x00user1", t: 2, hasR: true, hasT: true}}},
		{`"in-flight";q=10;qu="concurrent-requests"`, []limitItem{{id: "in-flight", unitsConc: true}}},
		{`"a";r=1;x=?0;y=1.5;z=tok`, []limitItem{{id: "a", r: 1, hasR: true}}},
		{``, nil},
		{`"a";r=1,`, nil},               // trailing comma
		{`("a" "b");r=1`, nil},          // an inner list
		{`"a";r=1000000000000000`, nil}, // 16 digits
		{`"a";R=1`, nil},                // upper-case key
		{`"unterminated;r=1`, nil},      // never closed
		{`5;r=1`, nil},                  // a policy is named by a string or token
		{`"a";pk=:!!:`, nil},            // bad base64
		{`"a"  ;r=1`, nil},              // space before a parameter
		{`"a";r=-3;t=-1`, []limitItem{{id: "a", r: -3, t: -1, hasR: true, hasT: true}}},
	} {
		got := parseLimits([]string{tc.in}, nil)
		if len(got) != len(tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: item %d %+v, want %+v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

// TestParseLimitsLines: several field lines are one list, as HTTP
// combines them (RFC 9110 section 5.3, RFC 9651 section 4.2).
func TestParseLimitsLines(t *testing.T) {
	many := strings.Repeat(`"a";r=1, `, maxItems-1) + `"a";r=1`
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string // ids
	}{
		{"two lines", []string{`"spent";r=0;t=30`, `"other";r=5;t=30`}, []string{"spent", "other"}},
		{"three lines", []string{`a;r=1`, `b;r=2, c;r=3`, `d;r=4`}, []string{"a", "b", "c", "d"}},
		{"an empty line adds nothing", []string{`a;r=1`, ``, `b;r=2`}, []string{"a", "b"}},
		{"a malformed line fails the whole field", []string{`"spent";r=0;t=30`, `not a list (`}, nil},
		{"a trailing comma before the next line fails it", []string{`a;r=1,`, `b;r=2`}, nil},
		{"items are bounded across lines", []string{many, `"b";r=1`}, slicesRepeat("a", maxItems)},
		{"length is bounded across lines", []string{`"a";r=1`, strings.Repeat(" ", maxFieldLen-10) + `"b";r=1`}, nil},
	} {
		got := parseLimits(tc.lines, nil)
		var ids []string
		for _, it := range got {
			ids = append(ids, it.id)
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: read as %q, want %q", tc.name, ids, tc.want)
		}
	}
	// Appending keeps what dst held.
	if got := parseLimits([]string{`b;r=1`}, []limitItem{{id: "a"}}); len(got) != 2 || got[0].id != "a" || got[1].id != "b" {
		t.Errorf("appending to a non-empty dst: %+v", got)
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestParsesWhatTheServerWrites: every field the middleware writes (via
// internal/ratefield) reads back as it was meant.
func TestParsesWhatTheServerWrites(t *testing.T) {
	q := shed.Quota{Policy: `we"ird\name`, Limit: 100, Window: time.Minute, Remaining: 0, Reset: 1500 * time.Millisecond}
	policy, limit := ratefield.AppendQuota(nil, nil, &q, true)
	q2 := shed.Quota{Policy: "in-flight", Limit: 8, Remaining: 3}
	policy, limit = ratefield.AppendQuota(policy, limit, &q2, false)
	lim := parseLimits([]string{string(limit)}, nil)
	pol := parseLimits([]string{string(policy)}, nil)
	if len(lim) != 2 || lim[0].id != `we"ird\name` || lim[0].r != 0 || lim[0].t != 2 || lim[1].r != 3 || lim[1].hasT {
		t.Fatalf("RateLimit %q read as %+v", limit, lim)
	}
	if len(pol) != 2 || pol[0].id != `we"ird\name` || !pol[1].unitsConc {
		t.Fatalf("RateLimit-Policy %q read as %+v", policy, pol)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{"0", 0, true},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"Wed, 25 Nov 2026 03:00:30 GMT", 30 * time.Second, true},
		{"Wed, 25 Nov 2020 03:00:30 GMT", 0, true}, // the past: now
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxDuration, true},
		{"99999999999999999999999", maxDuration, true},
		{"soon", 0, false},
		{"", 0, false},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{
		`"per-key";r=0;t=30`, `a;r=1, b;r=0;t=5;pk=:YQ==:`, `"x";q=10;qu="concurrent-requests"`,
		`"a";r=-1;t=999999999999999`, `("a");r=1`, `"a";r=1;t=1.5`, `?1`, `"\"`, `"a";pk=:`, "\"a\";r=1,\t\"b\"",
		"\"a\";r=0;t=5\n\"b\";r=1", "\"a\";r=0;t=5\n(", "\n\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// A newline splits s into field lines.
		for _, it := range parseLimits(strings.Split(s, "\n"), nil) {
			if it.hasT && it.t > 999_999_999_999_999 || it.hasR && it.r < -999_999_999_999_999 {
				t.Fatalf("%q: out-of-range integer %+v", s, it)
			}
			if seconds(it.t) < 0 {
				t.Fatalf("%q: negative wait", s)
			}
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "1e9", "9223372036854775807"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parseRetryAfter(s, now); d < 0 || !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, %v", s, d, ok)
		}
	})
}

func BenchmarkParseLimits(b *testing.B) {
	lines := []string{`"default";r=50;t=30, "burst";r=3;t=1`, `"per-user";r=0;t=12;pk=:dXNlcjE=:`}
	dst := make([]limitItem, 0, maxItems)
	b.ReportAllocs()
	for b.Loop() {
		dst = parseLimits(lines, dst[:0])
	}
}
