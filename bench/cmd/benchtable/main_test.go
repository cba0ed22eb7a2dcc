package main

import (
	"strings"
	"testing"
	"time"
)

func TestTables(t *testing.T) {
	raw := `goos: linux
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  10.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  30.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  20.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=b-2   100  250 ns/op  48 B/op  3 allocs/op
BenchmarkRedisRate/allow/keys=1/parallel/peer=r-2  100  50000 ns/op  1.000 cmds/op  20000 decisions/s  1.000 rt/op  704 B/op  22 allocs/op
BenchmarkRedisFleetTrips/workers=8-2  1  0 ns/op  35.42 rt/s  17610000 decisions/s  563000 B/op  2257 allocs/op
PASS
`
	var b strings.Builder
	if err := write(&b, parse(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"| row | a | b |",
		"| allow/keys=1/serial | 20.0 ns · 0 allocs | 250 ns · 3 allocs |",
		"| allow/keys=1/parallel | 20.0 k/s · 1 rt · 50.0 µs |",
		"| workers=8 | 35.42 rt/s · 17.61 M/s decisions |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// With -command, the tables come as a results file headed by their date,
// commit, command and the raw file's machine lines.
func TestResultsFile(t *testing.T) {
	raw := `machine-go: go1.26.8
machine-nproc: 2
BenchmarkClock/peer=time.Now-2   100  25.0 ns/op  0 B/op  0 allocs/op
BenchmarkClock/peer=time.Now-2   100  27.0 ns/op  0 B/op  0 allocs/op
machine-load-after: 1.0 0.5 0.2
`
	var b strings.Builder
	h := header{command: "./scripts/bench.sh", commit: "abc1234", raw: "bench/results/x.raw",
		date: time.Date(2026, 11, 26, 17, 0, 0, 0, time.UTC)}
	if err := run(&b, []byte(raw), h); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"# Results: benchmarks against the peers\n",
		"Written by `./scripts/bench.sh`",
		"| date | 2026-11-26 17:00 UTC |",
		"| commit | abc1234 |",
		"| go | go1.26.8 |",
		"| nproc | 2 |",
		"| load-after | 1.0 0.5 0.2 |",
		"median of 2 runs",
		"| row | time.Now |",
		"|  | 26.0 ns · 0 allocs |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// A raw file without results (a run that failed to build) writes nothing
// rather than an empty results file.
func TestNoResultsIsAnError(t *testing.T) {
	var b strings.Builder
	if err := run(&b, []byte("machine-go: go1.26.8\nFAIL\n"), header{command: "x", raw: "r"}); err == nil {
		t.Errorf("no error; wrote\n%s", b.String())
	}
	if b.Len() != 0 {
		t.Errorf("wrote %q", b.String())
	}
}
