package main

import (
	"bytes"
	"strings"
	"testing"
)

func runCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheck(t *testing.T) {
	code, out, _ := runCmd("check", "../../examples/loadshed.yaml")
	if code != 0 || !strings.Contains(out, "ok (layers: ratelimit-shadow, ratelimit, concurrency, fleet, worker)") {
		t.Errorf("check of the example: exit %d, %q", code, out)
	}
	code, _, errOut := runCmd("check", "../../config/testdata/broken/units.yaml", "../../config/testdata/broken/types.yaml")
	if code != 1 {
		t.Errorf("check of broken files: exit %d, want 1", code)
	}
	for _, want := range []string{
		`units.yaml:8:30: layers[0].ratelimit.descriptors[0].rate_limit.unit: unknown value "fortnight" (allowed: second, minute, hour, day)`,
		"units.yaml: 3 errors",
		"types.yaml: 5 errors",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut)
		}
	}
	if code, _, _ := runCmd("check"); code != 2 {
		t.Errorf("check without a file: exit %d, want 2", code)
	}
	if code, _, _ := runCmd("check", "no-such-file.yaml"); code != 1 {
		t.Errorf("check of a missing file: exit %d, want 1", code)
	}
}

func TestPrint(t *testing.T) {
	code, out, errOut := runCmd("print", "../../examples/loadshed.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"ratelimit-shadow  route_GET-v1-reports",
		"no (shadow)",
		"per-client",
		"100/minute",
		"POST /v1/charges      critical",
		"(any other route)     default",
		"64 for 250ms, adaptive LIFO",
		"decision-timeout    50ms",
		"critical 1, default 0.8, sheddable 0.6, test-mode 0.1",
		"0.8 / 0.7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("print lacks %q:\n%s", want, out)
		}
	}
}

func TestTry(t *testing.T) {
	code, out, errOut := runCmd("try", "../../examples/loadshed.yaml", "--key", "alice", "--route", "POST /v1/charges", "--n", "12")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"#1   200 OK",
		`Ratelimit-Policy: "route_POST-v1-charges.key";q=10;w=1`,
		"#11  429 Too Many Requests",
		"priority critical, route POST /v1/charges: ratelimit-shadow admitted, ratelimit rejected",
		"Retry-After: 1",
		"10 × 200, 2 × 429",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("try's output lacks %q:\n%s", want, out)
		}
	}
	// A priority the file limits: test-mode traffic, 50 a second.
	code, out, _ = runCmd("try", "../../examples/loadshed.yaml", "--key", "bob", "--route", "GET /v1/things/{id}", "--priority", "test-mode", "--n", "3")
	if code != 0 || !strings.Contains(out, "GET /v1/things/1 (route /v1/things/{id})") || !strings.Contains(out, "priority test-mode, route GET /v1/things/{id}: ratelimit-shadow admitted, ratelimit admitted, concurrency admitted, worker admitted") {
		t.Errorf("try with --priority: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"try", "../../examples/loadshed.yaml", "--route", "GET /"},
		{"try", "../../examples/loadshed.yaml", "--key", "k", "--route", "/v1"},
		{"try", "../../examples/loadshed.yaml", "--key", "k", "--route", "GET /", "--priority", "urgent"},
	} {
		if code, _, _ := runCmd(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
