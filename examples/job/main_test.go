package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	// Three run at once (the per-key in-flight limit); the concurrency
	// layer turns the nine others away, and since their rate tokens are
	// refunded, none of them is refused by the rate limit.
	if !strings.Contains(s, " 3 × ran") {
		t.Errorf("want exactly 3 jobs run, got:\n%s", s)
	}
	if strings.Contains(s, "rejected by ratelimit") {
		t.Errorf("rate tokens of jobs that never ran were not refunded:\n%s", s)
	}
	if !strings.Contains(s, " 9 × rejected by concurrency (429)") {
		t.Errorf("want jobs rejected by the in-flight limit, got:\n%s", s)
	}
}
