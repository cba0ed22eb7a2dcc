package rls

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/internal/hostileyaml"
)

// hostileEnvoyFiles are the files a refusal must cost little: the name, the
// file, and what the error says.
var hostileEnvoyFiles = []struct {
	name, data, msg string
}{
	{"descriptors multiplied by aliases", hostileyaml.EnvoyLaughs(9), "values"},
	{"six alias levels", hostileyaml.EnvoyLaughs(6), "values"},
	{"descriptors nested 10000 deep", hostileyaml.Deep(hostileyaml.EnvoyHead, "k", 10_000), "nested deeper than 100 levels"},
	{"lists nested 10000 deep", "domain: d\ndescriptors: " + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + "\n", "nested deeper than 100 levels"},
	{"maps nested 10000 deep", "domain: d\nx: " + strings.Repeat("{a: ", 10_000) + "b" + strings.Repeat("}", 10_000) + "\n", "nested deeper than 100 levels"},
	{"requests_per_unit 2.5", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2.5}\n", "want a whole number, got 2.5"},
	{"requests_per_unit as text", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: '5'}\n", "want a whole number"},
	{"requests_per_unit past uint32", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "from 0 to 4294967295"},
	{"a value read as other text", "domain: d\ndescriptors:\n  - key: code\n    value: 010\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "quote it"},
	{"a unit multiplier past a century", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 9223372036854775807, requests_per_unit: 1}\n", "unit_multiplier must be between 1 and 100"},
	{"a negative overage_for", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, mode: soft, overage: 0.1, overage_for: -5s}\n", "overage_for must be a duration"},
	{"a file of many short values", "domain: d\ndescriptors: [" + strings.Repeat("{key: k},", 100_000) + "]\n", "more than 200000 values"},
	{"a file over the size limit", "domain: d\n#" + strings.Repeat("x", config.DefaultMaxBytes) + "\n", "bytes, more than the"},
}

// Each hostile file is refused by the envoyproxy/ratelimit reader and by
// Load, with a position, in a few MB of heap.
func TestHostileEnvoyFilesAreRefusedCheaply(t *testing.T) {
	for _, c := range hostileEnvoyFiles {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.data)
			var errs config.Errors
			took, heap := hostileyaml.Measure(func() { _, errs = ParseEnvoyConfig("f.yaml", data) })
			t.Logf("ParseEnvoyConfig: %d bytes refused in %v, %.2f MiB allocated", len(data), took, heap)
			checkRefusal(t, errs, c.msg, heap)

			path := filepath.Join(t.TempDir(), "f.yaml")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			took, heap = hostileyaml.Measure(func() { _, err = Load(path) })
			t.Logf("Load: refused in %v, %.2f MiB allocated", took, heap)
			if !errors.As(err, &errs) {
				t.Fatalf("Load: %v, want config.Errors", err)
			}
			checkRefusal(t, errs, c.msg, heap)
		})
	}
}

func checkRefusal(t *testing.T, errs config.Errors, msg string, heap float64) {
	t.Helper()
	if len(errs) == 0 {
		t.Fatal("accepted")
	}
	if !strings.Contains(errs.Error(), msg) {
		t.Errorf("the refusal does not say %q:\n%v", msg, errs)
	}
	for _, e := range errs {
		if e.File == "" || e.Line == 0 || e.Column == 0 {
			t.Errorf("an error without a position: %v", e)
		}
	}
	if heap > 8 {
		t.Errorf("refusing it allocated %.1f MiB, want at most 8", heap)
	}
}

// A reload of the nine-level file is refused in a few MB, and the running
// rules keep serving.
func TestReloadOfAliasBombKeepsTheRules(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testServer(t, Config{Domains: ds})
	if err := os.WriteFile(file, []byte(hostileyaml.EnvoyLaughs(9)), 0o644); err != nil {
		t.Fatal(err)
	}
	took, heap := hostileyaml.Measure(func() { err = s.ReloadFrom(file) })
	t.Logf("ReloadFrom: refused in %v, %.2f MiB allocated: %v", took, heap, err)
	if err == nil {
		t.Fatal("applied")
	}
	if heap > 8 {
		t.Errorf("refusing it allocated %.1f MiB, want at most 8", heap)
	}
	if lim := ask(t, s, "d", desc("a=x")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 3 {
		t.Errorf("limit %d after the refused reload, want 3", lim)
	}
	if at, err := s.LastReload(); err == nil || at.IsZero() {
		t.Errorf("LastReload: %v %v, want the refusal", at, err)
	}
}

// A limit can be raised: the six-level file, refused by default, reads
// with more descriptors allowed.
func TestLimitsCanBeRaised(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte(hostileyaml.EnvoyLaughs(4)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadLimited(path, config.Limits{MaxRules: 100}); err == nil || !strings.Contains(err.Error(), "more than 100 descriptors") {
		t.Fatalf("2,345 descriptors within 100: %v", err)
	}
	ds, err := LoadLimited(path, config.Limits{MaxRules: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || len(ds[0].Descriptors) != 4 {
		t.Fatalf("%d domains", len(ds))
	}
}

// A loadshed file's limit past what Envoy's protocol holds is refused at
// its position, not served as 2^32-1.
func TestLoadRefusesALimitTheProtocolCannotHold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loadshed.yaml")
	data := "layers:\n  - ratelimit:\n      domain: api\n      descriptors:\n        - key: key\n          rate_limit: {unit: day, requests_per_unit: 5000000000}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	var es config.Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 6 || es[0].Column != 54 || !strings.Contains(es[0].Msg, "at most 4294967295") {
		t.Fatalf("Load: %v, want one error at 6:54", err)
	}
}

// A refused reload with thousands of errors logs one line of a few KB,
// with the first twenty errors and the count of the rest.
func TestRefusedReloadLogsOneBoundedLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s, _ := testServer(t, Config{Domains: ds, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  - {key: k%d, value: %s, rate_limit: {unit: fortnight, requests_per_unit: 3}}\n", i, strings.Repeat("v", 200))
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadFrom(file); err == nil {
		t.Fatal("applied")
	}
	out := logs.String()
	t.Logf("the refusal of 5,000 errors logged %d bytes", len(out))
	if strings.Count(out, "\n") != 1 || len(out) > config.MaxErrorText+1024 {
		t.Errorf("%d lines, %d bytes:\n%.600s", strings.Count(out, "\n"), len(out), out)
	}
	if !strings.Contains(out, "rules.yaml:3:") || !strings.Contains(out, " more errors") {
		t.Errorf("the line lacks the first error's position or the count:\n%.600s", out)
	}
}
