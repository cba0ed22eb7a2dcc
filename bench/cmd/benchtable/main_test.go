package main

import (
	"strings"
	"testing"
)

func TestTables(t *testing.T) {
	raw := `goos: linux
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  10.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  30.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=a-2   100  20.0 ns/op  0 B/op  0 allocs/op
BenchmarkRateMemory/allow/keys=1/serial/peer=b-2   100  250 ns/op  48 B/op  3 allocs/op
BenchmarkRedisRate/allow/keys=1/parallel/peer=r-2  100  50000 ns/op  1.000 cmds/op  20000 decisions/s  1.000 rt/op  704 B/op  22 allocs/op
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
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}
