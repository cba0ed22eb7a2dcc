package concurrency

import (
	"strings"
	"testing"
)

// FuzzEscapeKey: whatever a client sends as its key, the escaped form
// cannot open or close a hash tag, break a line, or grow without bound, and
// two different short keys never share a counter.
func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"", "plain", "a}b{c", "{", "}", "%7B", "%", "#", "new\nline", "\x00\x7f", strings.Repeat("x", 200), "ключ"} {
		f.Add(s, s+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escapeKey(a), escapeKey(b)
		for _, e := range []string{ea, eb} {
			if strings.ContainsAny(e, "{}\r\n\x00") {
				t.Fatalf("escaped key %q keeps a brace or control character", e)
			}
			if len(e) > 3*maxKeyLen {
				t.Fatalf("escaped key of %d bytes", len(e))
			}
		}
		if a != b && ea == eb && len(a) <= maxKeyLen && len(b) <= maxKeyLen {
			t.Fatalf("%q and %q escape to the same %q", a, b, ea)
		}
	})
}
