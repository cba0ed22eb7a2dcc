package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "loadshed.yaml")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// check names every section that needs Redis in a file without a redis
// section, beside the other errors of the same layer, and the four layer
// kinds when there is none.
func TestCheckListsEveryError(t *testing.T) {
	p := writeFile(t, `
layers:
  - ratelimit:
      store: redis
      descriptors:
        - key: key
          rate_limit: {unit: fortnight, requests_per_unit: 10}
  - concurrency:
      store: redis
      limit: 10
`)
	code, _, errOut := runCmd("check", p)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"layers[0].ratelimit.store: this layer shares its counts through Redis, and the file has no redis section",
		`layers[0].ratelimit.descriptors[0].rate_limit.unit: unknown value "fortnight"`,
		"layers[1].concurrency.store: this layer shares its counts through Redis, and the file has no redis section",
		"3 errors",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut)
		}
	}
	code, _, errOut = runCmd("check", writeFile(t, "layers: []\n"))
	if want := "(allowed: ratelimit, concurrency, fleet, worker)"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("a file without layers: exit %d, %q, want the four layers named", code, errOut)
	}
}

// A per_key above the limit never binds: check accepts the file, and
// warns with the position.
func TestCheckWarnsOfPerKeyAboveLimit(t *testing.T) {
	code, out, errOut := runCmd("check", writeFile(t, `
layers:
  - concurrency:
      limit: 10
      per_key: 20
`))
	if code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("exit %d, %q: want the file accepted", code, out)
	}
	if want := "warning: "; !strings.Contains(errOut, want) || !strings.Contains(errOut, ":5:16: layers[0].concurrency.per_key: 20 is above limit (10)") {
		t.Errorf("check's warnings: %q, want per_key's, with its position", errOut)
	}
}

// try --key K works whatever the file keys clients by: where it keys them
// by IP, a word is the key as it is, and an address the client's.
func TestTryTakesAnyKey(t *testing.T) {
	p := writeFile(t, `
layers:
  - ratelimit:
      descriptors:
        - key: key
          rate_limit: {unit: minute, requests_per_unit: 2}
`)
	for _, key := range []string{"alice", "192.0.2.7"} {
		code, out, errOut := runCmd("try", p, "--key", key, "--route", "GET /x", "--n", "3")
		if code != 0 || !strings.Contains(out, "2 × 200, 1 × 429") {
			t.Errorf("try --key %s: exit %d\n%s%s", key, code, out, errOut)
		}
	}
}
