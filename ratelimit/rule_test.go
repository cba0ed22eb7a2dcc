package ratelimit

import (
	"context"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

type fuzzVals struct{ a, b string }

type valsKey struct{}

func fromVals(pick func(fuzzVals) string) func(context.Context, shed.Request) string {
	return func(ctx context.Context, _ shed.Request) string { return pick(ctx.Value(valsKey{}).(fuzzVals)) }
}

// ruleKeys builds the keys of a two-entry rule and of a bare one-entry rule.
func ruleKeys(t testing.TB) (two, bare *compiledRule) {
	t.Helper()
	m := mem(t, shedtest.NewClock(contractStart), FixedWindow, PerSecond(1))
	l, err := New(Config{Rules: []Rule{
		{Name: "two", Domain: "api", Store: m, Descriptors: []Descriptor{
			By("x", fromVals(func(v fuzzVals) string { return v.a })),
			By("y", fromVals(func(v fuzzVals) string { return v.b }))}},
		{Name: "bare", Store: mem(t, shedtest.NewClock(contractStart), FixedWindow, PerSecond(1)), Descriptors: []Descriptor{
			By("x", fromVals(func(v fuzzVals) string { return v.a }))}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l.rules[0].bare || !l.rules[1].bare {
		t.Fatalf("bare = %v, %v; want false, true", l.rules[0].bare, l.rules[1].bare)
	}
	return l.rules[0], l.rules[1]
}

func keyOf(c *compiledRule, v fuzzVals) (string, bool) {
	ctx := context.WithValue(context.Background(), valsKey{}, v)
	return c.key(ctx, &shed.Request{})
}

func checkKeyShape(t *testing.T, k string) {
	t.Helper()
	if strings.HasPrefix(k, "#") {
		if len(k) != 44 || strings.ContainsAny(k[1:], "#%{} \n") {
			t.Fatalf("digest key %q malformed", k)
		}
		return
	}
	if len(k) > MaxRuleKeyBytes {
		t.Fatalf("key of %d bytes, above MaxRuleKeyBytes", len(k))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == '#' {
			t.Fatalf("key %q holds byte %q", k, c)
		}
	}
}

// FuzzRuleKey checks that rule keys are injective (different values never
// share a key), bounded, and free of bytes significant to Redis.
func FuzzRuleKey(f *testing.F) {
	seeds := [][4]string{
		{"a:b", "c", "a", "b:c"},
		{"1:a", "", "1", ":a"},
		{"%41", "x", "A", "x"},
		{"{tag}", "y", "%7Btag%7D", "y"},
		{"#abc", "", "abc", ""},
		{"a b\nc", "\x00", "a b\nc", "\x01"},
		{strings.Repeat("x", 300), "", strings.Repeat("x", 301), ""},
		{strings.Repeat("é", 100), "z", strings.Repeat("é", 100), "z"},
		{"same", "same", "same", "same"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	two, bare := ruleKeys(f)
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		v1, v2 := fuzzVals{a, b}, fuzzVals{c, d}
		k1, ok1 := keyOf(two, v1)
		k2, ok2 := keyOf(two, v2)
		if ok1 != (a != "" && b != "") || ok2 != (c != "" && d != "") {
			t.Fatalf("rule applies %v/%v to %q/%q", ok1, ok2, v1, v2)
		}
		if ok1 && ok2 {
			checkKeyShape(t, k1)
			checkKeyShape(t, k2)
			if (k1 == k2) != (v1 == v2) {
				t.Fatalf("values %q and %q give keys %q and %q", v1, v2, k1, k2)
			}
		}
		b1, ok1 := keyOf(bare, v1)
		b2, ok2 := keyOf(bare, v2)
		if ok1 && ok2 {
			checkKeyShape(t, b1)
			checkKeyShape(t, b2)
			if (b1 == b2) != (a == c) {
				t.Fatalf("bare values %q and %q give keys %q and %q", a, c, b1, b2)
			}
		}
	})
}

func TestRuleKeyBareNeedsNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, PerSecond(10))}}})
	req := shed.Request{Key: "client-1"}
	n := testing.AllocsPerRun(100, func() {
		if k, _ := l.rules[0].key(context.Background(), &req); k != "client-1" {
			t.Fatalf("bare key %q", k)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations building a bare key", n)
	}
}

func TestLayerReadsRoute(t *testing.T) {
	store, err := NewMemory(TokenBucket, PerSecond(10), MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	custom := By("tenant", func(context.Context, shed.Request) string { return "t" })
	for _, tc := range []struct {
		d    []Descriptor
		want bool
	}{
		{[]Descriptor{ByClient}, false},
		{[]Descriptor{ByClient, ByRoute}, true},
		{[]Descriptor{RouteIs("GET /x"), ByClient}, true},
		{[]Descriptor{custom}, true},
	} {
		l, err := New(Config{Rules: []Rule{{Name: "r", Descriptors: tc.d, Store: store}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.ReadsRoute(); got != tc.want {
			t.Errorf("ReadsRoute with %v = %v, want %v", tc.d, got, tc.want)
		}
	}
}
