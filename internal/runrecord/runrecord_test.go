package runrecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteFile replaces the file whole, readable by all, and leaves no
// temporary file beside it.
func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "results.md")
	for _, body := range []string{"first\n", "second\n"} {
		if err := WriteFile(path, []byte(body)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != body {
			t.Fatalf("read %q, %v; want %q", b, err, body)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files in the directory, want the results file alone", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x.md"), nil); err == nil {
		t.Fatal("no error for a directory that does not exist")
	}
}

// Commit names a revision (in this repository, or the one built in).
func TestCommitNamesARevision(t *testing.T) {
	for _, describe := range []bool{false, true} {
		if c := Commit("", describe); c == "" || strings.ContainsAny(c, " \n") {
			t.Fatalf("Commit(describe %v) = %q, want one word", describe, c)
		}
	}
}
