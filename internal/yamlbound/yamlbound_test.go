package yamlbound

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// laughs is a "billion laughs" over envoyproxy/ratelimit descriptors: each
// level lists ten descriptors whose children are the previous level.
func laughs(levels int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: l0\n    descriptors: &a0 [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "  - key: l%d\n    descriptors: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}", j, i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// measure runs f and reports the time and the heap it allocated.
func measure(t *testing.T, f func()) (time.Duration, uint64) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return took, after.TotalAlloc - before.TotalAlloc
}

func TestParseRefusesHostileFiles(t *testing.T) {
	for _, c := range []struct {
		name, data string
		line, col  int
		msg        string
	}{
		{"laughs", laughs(9), 14, 133, "past 1000000 values"},
		{"deep flow lists", strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000), 1, 101, "deeper than 100"},
		{"deep flow maps", strings.Repeat("{a: ", 10_000) + "b" + strings.Repeat("}", 10_000), 1, 401, "deeper than 100"},
		{"deep block lists", strings.Repeat("- ", 10_000) + "a\n", 1, 201, "deeper than 100"},
		{"deep block maps", func() string {
			var b strings.Builder
			for i := range 1000 {
				b.WriteString(strings.Repeat(" ", i) + "a:\n")
			}
			return b.String()
		}(), 101, 101, "deeper than 100"},
		{"deep descriptors", "domain: d\ndescriptors: " + strings.Repeat("[{key: k, descriptors: ", 10_000) + "[]" + strings.Repeat("}]", 10_000), 2, 1142, "deeper than 100"},
		{"closers in quotes", strings.Repeat(`[ "]}", '] ''}', `, 10_000) + strings.Repeat("]", 10_000), 1, 1701, "deeper than 100"},
		{"too large", strings.Repeat("a: b\n", 1<<20), 838861, 5, "more than the 4194304 read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			data := []byte(c.data)
			took, heap := measure(t, func() { _, err = Parse(data, Limits{}) })
			t.Logf("%d bytes refused in %v, %.1f MiB allocated: %v", len(c.data), took, float64(heap)/(1<<20), err)
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("error %v, want one saying %q", err, c.msg)
			}
			if e.Line != c.line || (c.col != 0 && e.Column != c.col) {
				t.Errorf("at %d:%d, want %d:%d", e.Line, e.Column, c.line, c.col)
			}
			if heap > 8<<20 {
				t.Errorf("refusing it allocated %d bytes, want at most 8 MiB", heap)
			}
		})
	}
}

// Below the limits the same shapes parse; raising a limit reads a file the
// default refuses.
func TestParseWithinLimits(t *testing.T) {
	for _, data := range []string{laughs(5), strings.Repeat("[", 99) + strings.Repeat("]", 99), "a:\n  b:\n  - c\n  - d: [e]\n  f: g\n"} {
		if _, err := Parse([]byte(data), Limits{}); err != nil {
			t.Errorf("%.40q: %v", data, err)
		}
	}
	deep := strings.Repeat("[", 150) + strings.Repeat("]", 150)
	if _, err := Parse([]byte(deep), Limits{MaxDepth: 200}); err != nil {
		t.Errorf("150 deep with a limit of 200: %v", err)
	}
	if _, err := Parse([]byte(laughs(7)), Limits{MaxNodes: 100}); err == nil {
		t.Error("laughs(7) within 100 values")
	}
}

// The nesting the scanner sees is never less than the parsed tree's: a
// file the exact check would refuse is refused before it is parsed.
func TestScanDepthIsNotLessThanTheTree(t *testing.T) {
	for _, data := range []string{
		"a:\n  b:\n    c: d\n",
		"a:\n- b\n- c:\n  - d\n",
		"- - - a\n",
		"- a: b\n  c:\n    d: [e, {f: g}]\n",
		"a: &x\n  b: c\nd: *x\n",
		"a: |\n  - [ {\n  - b\nc: d\n",
	} {
		for max := 1; max < 8; max++ {
			scanErr := scanDepth([]byte(data), max)
			f, err := parse([]byte(data))
			if err != nil {
				t.Fatalf("%q: %v", data, err)
			}
			w := walker{lim: Limits{MaxDepth: max, MaxNodes: 1000, MaxBytes: 1000}, anchors: map[string]cost{}}
			_, treeErr := w.walk(f.Docs[0].Body, 0)
			if treeErr != nil && scanErr == nil {
				t.Errorf("%q at %d: the tree is too deep (%v) but the scan let it through", data, max, treeErr)
			}
		}
	}
}

// FuzzParse: no input panics; a file Parse accepts is within the limits;
// and the scan of the bytes never lets through a tree much deeper than
// its limit (so that the parser never sees deep nesting).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		laughs(3), laughs(9), "a:\n  b:\n  - c\n  - d: [e]\n  f: g\n", "- - - a\n", "a: |\n  - [ {\n  - b\nc: d\n",
		strings.Repeat("[", 30) + strings.Repeat("]", 30), strings.Repeat(`[ "]}", '] ''}', `, 30), "{a: [b, {c: d}], e: &x [f], g: *x}",
		"a: &x\n  b: c\nd: *x\n", "? [a]\n: b\n", "--- [a]\n--- {b: c}\n", "a: \"multi\n  line: [\"\n",
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBytes: 1 << 20, MaxDepth: 10, MaxNodes: 10_000}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, lim)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Line < 1 || e.Column < 1 {
				t.Fatalf("error without a position: %v", err)
			}
		} else if file == nil {
			t.Fatal("no file and no error")
		}
		if scanDepth(data, lim.MaxDepth) != nil {
			return
		}
		f, err := parse(data)
		if err != nil {
			return
		}
		for _, doc := range f.Docs {
			if doc == nil || doc.Body == nil {
				continue
			}
			if c := treeDepth(doc.Body); c > 4*lim.MaxDepth {
				t.Fatalf("the scan let through a tree %d deep, limit %d:\n%q", c, lim.MaxDepth, data)
			}
		}
	})
}

// treeDepth is the nesting of the tree as parsed, aliases not expanded.
func treeDepth(n ast.Node) int {
	switch v := n.(type) {
	case *ast.AnchorNode:
		return treeDepth(v.Value)
	case *ast.TagNode:
		return treeDepth(v.Value)
	case *ast.MappingNode:
		d := 0
		for _, mv := range v.Values {
			d = max(d, treeDepth(mv))
		}
		return d
	case *ast.MappingValueNode:
		return 1 + max(treeDepth(v.Key), treeDepth(v.Value))
	case *ast.MappingKeyNode:
		return treeDepth(v.Value)
	case *ast.SequenceNode:
		d := 0
		for _, item := range v.Values {
			d = max(d, treeDepth(item))
		}
		return 1 + d
	}
	return 0
}
