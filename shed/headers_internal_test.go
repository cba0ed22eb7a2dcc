package shed

import (
	"strconv"
	"sync"
	"testing"
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
	a := v.str(sfInt(v.buf[v.n:v.n], 123456789012345))
	b := v.str(sfInt(v.buf[v.n:v.n], 999))
	c := v.str(sfInt(v.buf[v.n:v.n], 1<<62))
	d := v.str(sfInt(v.buf[v.n:v.n], 5)) // the buffer is full: copied out
	if a != "123456789012345" || b != "999" || c != "999999999999999" || d != "5" {
		t.Errorf("got %q %q %q %q", a, b, c, d)
	}
	var f fieldValues
	if s := f.str(nil); s != "" {
		t.Errorf("empty: %q", s)
	}
}
