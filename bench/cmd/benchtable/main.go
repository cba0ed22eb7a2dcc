// Command benchtable turns the raw output of the bench module's benchmarks
// into the Markdown tables of docs/benchmarks.md: one table per benchmark,
// a row per sub-benchmark without its peer, a column per peer, each cell
// the median over -count runs.
//
//	benchtable bench/results/20261121T130000Z.raw
//
// Cells read "ns/op · allocs/op", or, for rows reporting decisions/s (the
// Redis ones), "decisions/s · round trips per decision · µs/op".
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable RAW")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	defer f.Close()
	if err := write(os.Stdout, parse(f)); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
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
