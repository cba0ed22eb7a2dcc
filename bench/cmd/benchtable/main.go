// Command benchtable turns the raw output of the bench module's benchmarks
// into Markdown tables: one table per benchmark, a row per sub-benchmark
// without its peer, a column per peer, each cell the median over -count
// runs. With -command it writes the whole results file,
// docs/results/benchmarks.md, headed by the date, the commit and the
// machine (the raw file's machine-* lines, as scripts/bench.sh writes them).
//
//	benchtable bench/results/20261121T130000Z.raw
//	benchtable -command './scripts/bench.sh' -commit 1a2b3c4 RAW > docs/results/benchmarks.md
//
// Cells read "ns/op · allocs/op", or, for rows reporting decisions/s (the
// Redis ones), "decisions/s · round trips per decision · µs/op", or, for
// rows reporting rt/s (a background load), "round trips/s · decisions/s".
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	var h header
	flag.StringVar(&h.command, "command", "", "the command that made the raw file: write the whole results file, headed by it")
	flag.StringVar(&h.commit, "commit", "", "the commit measured (with -command)")
	flag.StringVar(&h.raw, "raw-name", "", "the raw file's name to print (with -command; default: the argument)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: benchtable [-command CMD -commit REV] RAW")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if h.raw == "" {
		h.raw = flag.Arg(0)
	}
	h.date = time.Now().UTC()
	if err := run(os.Stdout, data, h); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// header is what heads a results file: where and when its figures come
// from.
type header struct {
	command, commit, raw string
	date                 time.Time
}

// run writes the tables of data, a raw output, headed as a results file
// when h names its command.
func run(w io.Writer, data []byte, h header) error {
	groups := parse(bytes.NewReader(data))
	if len(groups) == 0 {
		return fmt.Errorf("%s holds no benchmark result", h.raw)
	}
	if h.command != "" {
		if err := writeHeader(w, data, h, groups); err != nil {
			return err
		}
	}
	return write(w, groups)
}

// writeHeader writes the results file's title, its provenance (date,
// commit, command, the machine-* lines of the raw output) and how to read
// a cell.
func writeHeader(w io.Writer, data []byte, h header, groups []*group) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Results: benchmarks against the peers\n\n")
	fmt.Fprintf(bw, "Written by `%s` (do not edit by hand); how the rows are built and how\n", h.command)
	fmt.Fprintf(bw, "to read them: [../benchmarks.md](../benchmarks.md).\n\n")
	fmt.Fprintf(bw, "| | |\n|---|---|\n")
	fmt.Fprintf(bw, "| date | %s |\n", h.date.Format("2006-01-02 15:04 UTC"))
	if h.commit != "" {
		fmt.Fprintf(bw, "| commit | %s |\n", h.commit)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok && strings.HasPrefix(k, "machine-") {
			fmt.Fprintf(bw, "| %s | %s |\n", strings.TrimPrefix(k, "machine-"), v)
		}
	}
	fmt.Fprintf(bw, "| raw output | `%s` (git-ignored) |\n\n", h.raw)
	runs := 0
	for _, g := range groups {
		for _, row := range g.cells {
			for _, units := range row {
				runs = max(runs, len(units["ns/op"]))
			}
		}
	}
	fmt.Fprintf(bw, "Each cell is the median of %d runs: `time per operation · allocations per\n", runs)
	fmt.Fprintf(bw, "operation`, or on the Redis rows `decisions per second · round trips per\n")
	fmt.Fprintf(bw, "decision · time per operation`.\n")
	return bw.Flush()
}

// group is one benchmark function's results.
type group struct {
	name  string
	rows  []string
	peers []string
	// cells[row][peer][unit] holds every run's value.
	cells map[string]map[string]map[string][]float64
}

func parse(r io.Reader) []*group {
	var groups []*group
	byName := map[string]*group{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 { // the -GOMAXPROCS suffix
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		base, rest, _ := strings.Cut(strings.TrimPrefix(name, "Benchmark"), "/")
		row, peer := rest, "-"
		if i := strings.Index(rest, "/peer="); i >= 0 {
			row, peer = rest[:i], rest[i+len("/peer="):]
		} else if p, ok := strings.CutPrefix(rest, "peer="); ok {
			row, peer = "", p
		}
		g := byName[base]
		if g == nil {
			g = &group{name: base, cells: map[string]map[string]map[string][]float64{}}
			byName[base] = g
			groups = append(groups, g)
		}
		if !slices.Contains(g.rows, row) {
			g.rows = append(g.rows, row)
		}
		if !slices.Contains(g.peers, peer) {
			g.peers = append(g.peers, peer)
		}
		if g.cells[row] == nil {
			g.cells[row] = map[string]map[string][]float64{}
		}
		if g.cells[row][peer] == nil {
			g.cells[row][peer] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			g.cells[row][peer][fields[i+1]] = append(g.cells[row][peer][fields[i+1]], v)
		}
	}
	return groups
}

func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func ns(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1f µs", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f ns", v)
	default:
		return fmt.Sprintf("%.1f ns", v)
	}
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f /s", v)
	}
}

func cell(units map[string][]float64) string {
	if units == nil {
		return ""
	}
	t, _ := median(units["ns/op"])
	if trips, ok := median(units["rt/s"]); ok {
		// A background load (BenchmarkRedisFleetTrips): round trips a
		// second against decisions a second, each iteration a second of
		// wall time, so no time per operation.
		d, _ := median(units["decisions/s"])
		return fmt.Sprintf("%.4g rt/s · %s decisions", trips, rate(d))
	}
	if d, ok := median(units["decisions/s"]); ok {
		rt, _ := median(units["rt/op"])
		return fmt.Sprintf("%s · %.4g rt · %s", rate(d), rt, ns(t))
	}
	a, _ := median(units["allocs/op"])
	return fmt.Sprintf("%s · %.0f allocs", ns(t), a)
}

func write(w io.Writer, groups []*group) error {
	bw := bufio.NewWriter(w)
	for _, g := range groups {
		fmt.Fprintf(bw, "\n#### %s\n\n| row | %s |\n|---|", g.name, strings.Join(g.peers, " | "))
		for range g.peers {
			bw.WriteString("---|")
		}
		bw.WriteString("\n")
		for _, row := range g.rows {
			fmt.Fprintf(bw, "| %s |", row)
			for _, p := range g.peers {
				fmt.Fprintf(bw, " %s |", cell(g.cells[row][p]))
			}
			bw.WriteString("\n")
		}
	}
	return bw.Flush()
}
