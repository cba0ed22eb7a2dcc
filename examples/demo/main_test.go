package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSelfTest runs the demo as `demo -selftest` does: a real server on a
// free loopback port, a bounded number of requests to itself.
func TestSelfTest(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-selftest"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errOut)
	}
	s := out.String()
	for _, want := range []string{
		"429 Too Many Requests",
		"Retry-After: ",
		`Ratelimit-Policy: "sheddable-per-key";q=2;w=60`,
		"Content-Type: application/problem+json",
		"violated-policies",
		"POST /v1/charges -> 201 Created",
		`"in-flight-per-key";q=8;qu="concurrent-requests"`, // the concurrency layer's policy
		"GET /metrics -> 200 OK",
		`priority="sheddable",result="rejected",status="429"} 1`, // loadshed_requests_total
		"GET /debug/loadshed?format=json -> 200 OK",
		"selftest: ok",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestBadFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-nope"}, &out, &errOut); code != 2 {
		t.Errorf("exit %d for an unknown flag, want 2", code)
	}
}
