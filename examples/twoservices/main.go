// Command twoservices shows loadshed across two services on loopback:
// service A calls service B over HTTP and gRPC at several times B's
// capacity, B doing one core of CPU-bound work behind loadshed. It runs
// the same load four times, with and without each feature:
//
//   - propagation: A's calls carry their priority (Loadshed-Priority, the
//     loadshed-priority metadata) and deadline, and B believes A (a trusted
//     peer), so A's critical calls stay critical in B while its sheddable
//     ones are shed;
//
//   - the cooperating client (package shedclient): A throttles itself
//     adaptively and keeps a retry budget, so B has far fewer requests to
//     reject, for the same goodput.
//
//     go run ./examples/twoservices                  # 5x for 10s per run
//     go run ./examples/twoservices -load 10 -duration 20s
//     go run ./examples/twoservices -results docs/results   # and write docs/results/twoservices.md
//
// With -results DIR the run also writes DIR/twoservices.md: its table,
// settings, date, machine and commit. docs/results/twoservices.md is that
// file; run the command above from the repository's root to renew it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/loadshed/loadshed/internal/runrecord"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("twoservices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	load := fs.Float64("load", 5, "offered load, as a multiple of B's capacity")
	duration := fs.Duration("duration", 10*time.Second, "how long each run offers the load")
	work := fs.Duration("work", 5*time.Millisecond, "CPU one call takes in B (B's capacity is 1/work per second)")
	critical := fs.Float64("critical", 0.1, "share of A's calls that are critical")
	timeout := fs.Duration("timeout", time.Second, "each call's deadline")
	rounds := fs.Int("rounds", 5, "runs of each set-up, interleaved, that each last duration/rounds")
	resultsDir := fs.String("results", "", "also write the run's table, with its date, machine and commit, to this directory's "+resultsName+" (docs/results from the repository's root)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Fprintf(stdout, "B: one core, %v per call (capacity %.0f/s); A offers %.1fx (%.0f/s, %.0f%% critical) for %v per set-up, in %d rounds\n",
		*work, 1/work.Seconds(), *load, *load/work.Seconds(), 100**critical, *duration, *rounds)
	if *rounds < 1 {
		*rounds = 1
	}
	var setups []Setup
	for _, f := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		setups = append(setups, Setup{Work: *work, Load: *load, Critical: *critical,
			Duration: *duration / time.Duration(*rounds), Timeout: *timeout, Propagate: f[0], Cooperate: f[1]})
	}
	loadBefore := runrecord.LoadAverage()
	results, err := RunInterleaved(context.Background(), setups, *rounds)
	if err != nil {
		fmt.Fprintln(stderr, "twoservices:", err)
		return 1
	}
	for _, r := range results {
		fmt.Fprintln(stdout, r)
	}
	if *resultsDir != "" {
		p := provenance{Date: time.Now(), Machine: machine(), Load: [2]string{loadBefore, runrecord.LoadAverage()},
			Commit: runrecord.Commit(*resultsDir, true), Command: strings.TrimSpace("go run ./examples/twoservices " + strings.Join(args, " "))}
		path, err := writeResults(*resultsDir, p, *rounds, results)
		if err != nil {
			fmt.Fprintln(stderr, "twoservices:", err)
			return 1
		}
		fmt.Fprintln(stdout, "results:", path)
	}
	return 0
}
