package shedhttp

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/shed"
)

func TestPolicyCacheIsBoundedAndConcurrencySafe(t *testing.T) {
	var c policyCache
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3*maxCachedPolicies; i++ {
				want := `"p` + strconv.Itoa(i) + `";q=1;w=1`
				if got := c.intern([]byte(want)); got != want {
					t.Errorf("intern(%q) = %q", want, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*c.m.Load()); n != maxCachedPolicies {
		t.Errorf("cache holds %d values, want the bound %d", n, maxCachedPolicies)
	}
	// A cached value is handed out as it is, without a new string.
	b := []byte(`"p1";q=1;w=1`)
	if a := testing.AllocsPerRun(100, func() { _ = c.intern(b) }); a != 0 {
		t.Errorf("a cached value costs %v allocations, want 0", a)
	}
	long := make([]byte, maxCachedPolicyLen+1)
	for i := range long {
		long[i] = 'x'
	}
	if got := c.intern(long); got != string(long) {
		t.Error("a long value changed")
	}
	var nilCache *policyCache
	if got := nilCache.intern(b); got != string(b) {
		t.Errorf("nil cache: %q", got)
	}
}

func TestFieldValuesDoNotShareBytes(t *testing.T) {
	var v legacyValues
	a := v.str(ratefield.AppendInt(v.buf[v.n:v.n], 123456789012345))
	b := v.str(ratefield.AppendInt(v.buf[v.n:v.n], 999))
	c := v.str(ratefield.AppendInt(v.buf[v.n:v.n], 1<<62))
	d := v.str(ratefield.AppendInt(v.buf[v.n:v.n], 5)) // the buffer is full: copied out
	if a != "123456789012345" || b != "999" || c != "999999999999999" || d != "5" {
		t.Errorf("got %q %q %q %q", a, b, c, d)
	}
	var f fieldValues
	if s := f.str(nil); s != "" {
		t.Errorf("empty: %q", s)
	}
}

// BenchmarkWriteLeaseFields prices the RateLimit fields of an admitted
// request alone: one quota among four leases, into a reused header map.
func BenchmarkWriteLeaseFields(b *testing.B) {
	m := &middleware{sets: newPolicySets(0)}
	leases := make([]shed.Lease, 4)
	leases[0].Quota = shed.Quota{Policy: "per-key", Limit: 100, Window: 60e9, Remaining: 42, Reset: 17e9}
	h := make(map[string][]string)
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		m.writeLeaseFields(h, leases, false)
	}
}

func TestPolicySets(t *testing.T) {
	c := newPolicySets(0)
	leases := func(qs ...shed.Quota) []shed.Lease {
		ls := make([]shed.Lease, len(qs)+1) // a lease without a quota among them
		for i, q := range qs {
			ls[i+1].Quota = q
		}
		return ls
	}
	a := leases(shed.Quota{Policy: "per-key", Limit: 100, Window: 60e9}, shed.Quota{Policy: "in-flight", Limit: 10})
	b := leases(shed.Quota{Policy: "per-key", Limit: 100, Window: 60e9})
	sa, sb := c.lookup(a), c.lookup(b)
	if sa == nil || sb == nil || sa == sb {
		t.Fatalf("sets %p %p", sa, sb)
	}
	if want := `"per-key";q=100;w=60, "in-flight";q=10;qu="concurrent-requests"`; sa.policy != want {
		t.Errorf("policy %q, want %q", sa.policy, want)
	}
	if len(sa.starts) != 2 || sa.starts[0] != `"per-key";r=` || sa.starts[1] != `"in-flight";r=` {
		t.Errorf("starts %q", sa.starts)
	}
	for i := 0; i < 3; i++ { // alternating sets: each found again
		if c.lookup(a) != sa || c.lookup(b) != sb {
			t.Fatal("a cached set not found again")
		}
	}
	// A set that hashes like a cached one but differs is a miss: never the
	// other set's fields.
	h := uint64(42)
	c.add(h, a)
	if s := c.add(h, b); s != nil {
		t.Errorf("a colliding set got %q", s.policy)
	}
	if sa.matches(b) || sb.matches(a) || sb.matches(leases(shed.Quota{Policy: "per-key", Limit: 100, Window: 30e9})) {
		t.Error("matches accepts another set")
	}
	for i := 0; i < 2*maxCachedPolicySets; i++ {
		c.lookup(leases(shed.Quota{Policy: "p" + strconv.Itoa(i), Limit: 1}))
	}
	if n := len(*c.m.Load()); n != maxCachedPolicySets {
		t.Errorf("%d sets cached, want the bound %d", n, maxCachedPolicySets)
	}
	if c.lookup(leases(shed.Quota{Policy: "new", Limit: 1})) != nil {
		t.Error("a full cache returned a set for a new policy")
	}
}

// TestWriteLeaseFieldsMatchesBuilder checks the cached path against the
// fields built afresh, for values that fit fieldValues and that do not.
func TestWriteLeaseFieldsMatchesBuilder(t *testing.T) {
	long := strings.Repeat("n", 80)
	for _, qs := range [][]shed.Quota{
		{{Policy: "per-key", Limit: 100, Window: 60e9, Remaining: 7, Reset: 1}},
		{{Policy: long, Limit: 1 << 62, Window: 1, Remaining: 1 << 62, Reset: 1 << 62}, {Policy: "x\"y", Limit: 3, Remaining: -1}},
	} {
		ls := make([]shed.Lease, len(qs))
		var policy, limit []byte
		for i := range qs {
			ls[i].Quota, ls[i].Over = qs[i], i == 1
			policy, limit = appendQuota(policy, limit, &qs[i], i == 1)
		}
		m := &middleware{sets: newPolicySets(0)}
		for range 2 { // a miss, then a hit
			h := http.Header{}
			m.writeLeaseFields(h, ls, false)
			if got := h[HeaderRateLimitPolicy]; len(got) != 1 || got[0] != string(policy) {
				t.Errorf("RateLimit-Policy %q, want %q", got, policy)
			}
			if got := h[HeaderRateLimit]; len(got) != 1 || got[0] != string(limit) {
				t.Errorf("RateLimit %q, want %q", got, limit)
			}
		}
	}
}

// BenchmarkPolicySetsAlternating looks up two sets in turn from every
// goroutine, as a layer whose tightest policy changes from request to
// request makes the middleware do.
func BenchmarkPolicySetsAlternating(b *testing.B) {
	c := newPolicySets(0)
	sets := [2][]shed.Lease{make([]shed.Lease, 2), make([]shed.Lease, 2)}
	sets[0][0].Quota = shed.Quota{Policy: "per-key", Limit: 10}
	sets[1][0].Quota = shed.Quota{Policy: "overall", Limit: 100}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if c.lookup(sets[i&1]) == nil {
				b.Error("not cached")
			}
			i++
		}
	})
}
