package yamlbound

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadFile refuses a file past the size before reading it, at its first
// line; reads one within it; and passes on a missing file's error.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(path, []byte("a: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := ReadFile(path, 5)
	if err != nil || string(data) != "a: b\n" {
		t.Fatalf("within the size: %q, %v", data, err)
	}
	_, err = ReadFile(path, 4)
	var e *Error
	if !errors.As(err, &e) || e.Line != 1 || e.Column != 1 || !strings.Contains(e.Msg, "the file is 5 bytes, more than the 4 read") {
		t.Fatalf("past the size: %v, want an Error at 1:1", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.yaml"), 4); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v, want fs.ErrNotExist", err)
	}
}
