package yamlbound

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"

	"github.com/loadshed/loadshed/internal/hostileyaml"
)

func TestParseRefusesHostileFiles(t *testing.T) {
	for _, c := range []struct {
		name, data string
		line, col  int
		msg        string
	}{
		{"laughs", hostileyaml.EnvoyLaughs(9), 14, 133, "past 1000000 values"},
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
		{"deep descriptors", hostileyaml.Deep(hostileyaml.EnvoyHead, "k", 10_000), 2, 1142, "deeper than 100"},
		{"closers in quotes", strings.Repeat(`[ "]}", '] ''}', `, 10_000) + strings.Repeat("]", 10_000), 1, 1701, "deeper than 100"},
		{"too large", strings.Repeat("a: b\n", 1<<20), 838861, 5, "more than the 4194304 read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			data := []byte(c.data)
			took, heap := hostileyaml.Measure(func() { _, err = Parse(data, Limits{}) })
			t.Logf("%d bytes refused in %v, %.1f MiB allocated: %v", len(c.data), took, heap, err)
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("error %v, want one saying %q", err, c.msg)
			}
			if e.Line != c.line || (c.col != 0 && e.Column != c.col) {
				t.Errorf("at %d:%d, want %d:%d", e.Line, e.Column, c.line, c.col)
			}
			if heap > 8 {
				t.Errorf("refusing it allocated %.1f MiB, want at most 8", heap)
			}
		})
	}
}

// Below the limits the same shapes parse; raising a limit reads a file the
// default refuses.
func TestParseWithinLimits(t *testing.T) {
	for _, data := range []string{hostileyaml.EnvoyLaughs(5), strings.Repeat("[", 99) + strings.Repeat("]", 99), "a:\n  b:\n  - c\n  - d: [e]\n  f: g\n"} {
		if _, err := Parse([]byte(data), Limits{}); err != nil {
			t.Errorf("%.40q: %v", data, err)
		}
	}
	deep := strings.Repeat("[", 150) + strings.Repeat("]", 150)
	if _, err := Parse([]byte(deep), Limits{MaxDepth: 200}); err != nil {
		t.Errorf("150 deep with a limit of 200: %v", err)
	}
	if _, err := Parse([]byte(hostileyaml.EnvoyLaughs(7)), Limits{MaxNodes: 100}); err == nil {
		t.Error("hostileyaml.EnvoyLaughs(7) within 100 values")
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
		hostileyaml.EnvoyLaughs(3), hostileyaml.EnvoyLaughs(9), "a:\n  b:\n  - c\n  - d: [e]\n  f: g\n", "- - - a\n", "a: |\n  - [ {\n  - b\nc: d\n",
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
