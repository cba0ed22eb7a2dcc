package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/internal/hostileyaml"
	"github.com/loadshed/loadshed/shed"
)

// Hostile files in loadshed's format are refused by Parse and Load with a
// position, in a few MB; a refusal with thousands of errors lists twenty.
func TestHostileFilesAreRefusedCheaply(t *testing.T) {
	opts := Options{MemoryOnly: true, Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
	for _, c := range []struct {
		name, data, msg string
		maxMiB          float64
	}{
		{"descriptors nested 10000 deep", hostileyaml.Deep(hostileyaml.LoadshedHead, "key", 10_000), "nested deeper than 100 levels", 8},
		{"descriptors nested 10000 deep in JSON", `{"layers": [{"ratelimit": {"descriptors": ` + strings.Repeat(`[{"key": "key", "descriptors": `, 10_000) + "[]" + strings.Repeat("}]", 10_000) + "}}]}", "nested deeper than 100 levels", 8},
		{"descriptors multiplied by aliases", hostileyaml.LoadshedLaughs(9), "values", 8},
		// Within the limits: decoded, then thousands of errors. It costs
		// what a file of that many descriptors costs; the message stays short.
		{"thousands of errors", hostileyaml.LoadshedLaughs(4), "more errors", 64},
		{"a file over the size limit", "layers: []\n#" + strings.Repeat("x", DefaultMaxBytes) + "\n", "bytes, more than the", 8},
		{"requests_per_unit 2.5", "layers:\n  - ratelimit:\n      descriptors:\n        - key: key\n          rate_limit: {unit: second, requests_per_unit: 2.5}\n", "want a whole number", 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.data)
			var err error
			took, heap := hostileyaml.Measure(func() { _, err = Parse("f.yaml", data, opts) })
			t.Logf("Parse: %d bytes refused in %v, %.2f MiB allocated", len(data), took, heap)
			check(t, err, c.msg, heap, c.maxMiB)
			path := filepath.Join(t.TempDir(), "f.yaml")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			took, heap = hostileyaml.Measure(func() { _, err = Load(path, opts) })
			t.Logf("Load: refused in %v, %.2f MiB allocated", took, heap)
			check(t, err, c.msg, heap, c.maxMiB)
		})
	}
}

func check(t *testing.T, err error, msg string, heap, maxMiB float64) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("%v, want Errors", err)
	}
	text := err.Error()
	if !strings.Contains(text, msg) {
		t.Errorf("the refusal does not say %q:\n%.2000s", msg, text)
	}
	if lines := strings.Count(text, "\n") + 1; lines > MaxErrorsShown+1 || len(text) > 64<<10 {
		t.Errorf("%d errors make a message of %d lines, %d bytes", len(es), lines, len(text))
	}
	for _, e := range es {
		if e.Line == 0 || e.Column == 0 {
			t.Errorf("an error without a position: %v", e)
		}
	}
	if heap > maxMiB {
		t.Errorf("refusing it allocated %.1f MiB, want at most %.0f", heap, maxMiB)
	}
}

// A hostile file given to a running Live is refused in a few MB, the
// running configuration keeps serving, and LastReload tells of it.
func TestLiveRefusesAHostileFileAndKeepsServing(t *testing.T) {
	l, path := open(t, fmt.Sprintf(twoRules, 100), Options{})
	if at, err := l.LastReload(); !at.IsZero() || err != nil {
		t.Fatalf("LastReload before any: %v %v", at, err)
	}
	before := l.Current()
	writeFile(t, path, hostileyaml.LoadshedLaughs(9))
	var err error
	took, heap := hostileyaml.Measure(func() { err = l.Reload() })
	t.Logf("Reload: refused in %v, %.2f MiB allocated: %v", took, heap, err)
	if err == nil || heap > 8 {
		t.Fatalf("Reload: %v after %.1f MiB, want a refusal in at most 8", err, heap)
	}
	if l.Current() != before {
		t.Error("a refused file replaced the configuration")
	}
	at, lastErr := l.LastReload()
	if at.IsZero() || lastErr == nil || !strings.Contains(lastErr.Error(), "values") {
		t.Errorf("LastReload: %v %v, want the refusal", at, lastErr)
	}
	writeFile(t, path, fmt.Sprintf(twoRules, 101))
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if at2, err := l.LastReload(); err != nil || !at2.After(at) && !at2.Equal(at) {
		t.Errorf("LastReload after a good file: %v %v", at2, err)
	}
}

// ErrorText cuts a long refusal to MaxErrorText bytes.
func TestErrorTextIsBounded(t *testing.T) {
	err := Errors{{File: "f", Line: 1, Column: 1, Msg: strings.Repeat("é", 10_000)}}
	got := ErrorText(err)
	if len(got) > MaxErrorText+64 || !strings.Contains(got, "bytes more)") {
		t.Errorf("%d bytes: %.80q…", len(got), got)
	}
	if ErrorText(nil) != "" {
		t.Error("nil")
	}
}

// FuzzParseJSON: JSON (or anything) gives a file or Errors, each error with
// a position, a message of at most MaxErrorsShown errors and a count,
// never a panic.
func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(smallJSON))
	f.Add([]byte(`{"layers": [{"ratelimit": {"descriptors": [{"key": "key", "rate_limit": {"unit": "second", "requests_per_unit": 2.5}}]}}]}`))
	f.Add([]byte(`{"layers": [{"ratelimit": {"descriptors": ` + strings.Repeat(`[{"key": "key", "descriptors": `, 200) + "[]" + strings.Repeat("}]", 200) + "}}]}"))
	f.Add([]byte(`{"layers": [{"concurrency": {"limit": -1, "retry_after": "-1s"}}, {"worker": {}}]}`))
	f.Add([]byte(`[[[[{"a": "\ud800"}]]]]`))
	f.Add([]byte(hostileyaml.Deep(hostileyaml.LoadshedHead, "key", 200)))
	f.Add([]byte(hostileyaml.LoadshedLaughs(5)))
	opts := Options{Headroom: shed.HeadroomFunc(func() float64 { return 0.5 }), MemoryOnly: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.json", data, opts)
		if err == nil {
			if file == nil {
				t.Fatal("no file and no error")
			}
			return
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("Parse's error is not Errors: %v", err)
		}
		for _, e := range es {
			if e.Line == 0 || e.Column == 0 {
				t.Fatalf("an error without a position: %v\n%q", e, data)
			}
		}
		if lines := strings.Count(err.Error(), "\n") + 1; lines > MaxErrorsShown+1 {
			t.Fatalf("%d lines for %d errors", lines, len(es))
		}
	})
}
