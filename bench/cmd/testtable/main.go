// Command testtable turns what go test and benchstat print into Markdown
// tables for the generated results files under docs/results (as
// scripts/redis-results.sh writes docs/results/redis.md):
//
//	testtable -trim github.com/loadshed/loadshed/ tests.json   # go test -json -v
//	testtable -benchstat bench.csv                             # benchstat -format csv
//
// From go test -json: a row per test that logged figures (t.Log) or has
// no subtests, package by package (in the order the packages started),
// each package's tests in the order they ran: the test, its result and
// time (waits for a resource another package held included), and
// the lines it logged, without their file:line prefixes. A package that
// failed outside its tests (its build, a panic, a timeout) gets a row of
// its own.
//
// From benchstat's CSV: a row per benchmark, a column per unit (time,
// then the custom metrics, then B/op and allocs/op), each cell the
// median with its 95% confidence interval as benchstat gives them.
package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	trim := flag.String("trim", "", "a prefix to drop from package paths (the module's path and a slash)")
	bench := flag.Bool("benchstat", false, "the input is benchstat -format csv output, not go test -json")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testtable [-trim PREFIX] TEST.json | testtable -benchstat BENCH.csv")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtable:", err)
		os.Exit(1)
	}
	if *bench {
		err = writeBenchstat(os.Stdout, data)
	} else {
		err = writeTests(os.Stdout, data, *trim)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtable:", err)
		os.Exit(1)
	}
}

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// test is one test's (or one package's, Name "") result and logs.
type test struct {
	pkg, name string
	result    string // pass, fail, skip; "" when the run ended without one
	elapsed   time.Duration
	logs      []string
	parent    bool // it has subtests
	// continues: the last output line was a log line, which further
	// indented lines continue.
	continues bool
}

// logLine matches a line of t.Log's output: indented, then file:line.
var logLine = regexp.MustCompile(`^\s+[\w.\-]+\.go:\d+: (.*)$`)

// parseTests reads go test -json output into tests, grouped by package
// in the order the packages started, each package's in the order they
// started: packages run at once interleave their events.
func parseTests(data []byte) ([]*test, error) {
	var order []*test
	byName := map[[2]string]*test{}
	get := func(pkg, name string) *test {
		k := [2]string{pkg, name}
		t := byName[k]
		if t == nil {
			t = &test{pkg: pkg, name: name}
			byName[k] = t
			order = append(order, t)
		}
		return t
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	events := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue // go test's own lines, when its stderr was kept too
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		events++
		if e.Package == "" {
			continue
		}
		if e.Test == "" {
			// The package: only a failure says something the tests do not.
			switch e.Action {
			case "fail":
				p := get(e.Package, "")
				p.result = "fail"
				p.elapsed = time.Duration(e.Elapsed * float64(time.Second))
			case "output":
				if strings.HasPrefix(e.Output, "FAIL") || strings.Contains(e.Output, "panic:") || strings.Contains(e.Output, "build failed") {
					p := get(e.Package, "")
					p.logs = append(p.logs, strings.TrimSpace(e.Output))
				}
			}
			continue
		}
		t := get(e.Package, e.Test)
		if i := strings.LastIndexByte(e.Test, '/'); i > 0 {
			get(e.Package, e.Test[:i]).parent = true
		}
		switch e.Action {
		case "pass", "fail", "skip":
			t.result = e.Action
			t.elapsed = time.Duration(e.Elapsed * float64(time.Second))
		case "output":
			out := strings.TrimRight(e.Output, "\n")
			trimmed := strings.TrimSpace(out)
			switch {
			case strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- "):
				t.continues = false
			case logLine.MatchString(out):
				t.logs = append(t.logs, logLine.FindStringSubmatch(out)[1])
				t.continues = true
			case t.continues && trimmed != "" && out != trimmed:
				t.logs[len(t.logs)-1] += " " + trimmed
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if events == 0 {
		return nil, errors.New("no go test -json event in the input")
	}
	pkgs := map[string]int{}
	for _, t := range order {
		if _, ok := pkgs[t.pkg]; !ok {
			pkgs[t.pkg] = len(pkgs)
		}
	}
	slices.SortStableFunc(order, func(a, b *test) int { return pkgs[a.pkg] - pkgs[b.pkg] })
	return order, nil
}

// writeTests writes the table of data's tests.
func writeTests(w io.Writer, data []byte, trim string) error {
	tests, err := parseTests(data)
	if err != nil {
		return err
	}
	failed := map[string]bool{} // packages with a failed test, which says why
	for _, t := range tests {
		if t.name != "" && t.result == "fail" {
			failed[t.pkg] = true
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| test | result | figures it logged |\n|---|---|---|\n")
	rows := 0
	for _, t := range tests {
		if t.name == "" && (t.result != "fail" || failed[t.pkg]) {
			continue
		}
		if t.parent && len(t.logs) == 0 && t.result != "fail" {
			continue // its subtests have the rows
		}
		name := strings.TrimPrefix(t.pkg, trim)
		if t.name == "" {
			name += " (package)"
		} else {
			name = strings.TrimSpace(name + " `" + t.name + "`")
		}
		result := t.result
		switch result {
		case "":
			result = "no result (the run ended first)"
		case "fail":
			result = "**FAIL**"
		}
		if t.elapsed > 0 {
			result += fmt.Sprintf(" (%s)", t.elapsed.Round(time.Millisecond/10))
		}
		fmt.Fprintf(bw, "| %s | %s | %s |\n", cell(name), cell(result), cell(strings.Join(t.logs, "<br>")))
		rows++
	}
	if rows == 0 {
		return errors.New("the input has no test")
	}
	return bw.Flush()
}

// cell makes s fit in a Markdown table's cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\t", " ").Replace(s)
}

// writeBenchstat writes benchstat's CSV (one block per unit, each a
// header, then name,value,CI rows) as one table.
func writeBenchstat(w io.Writer, data []byte) error {
	var units, names []string
	cells := map[string]map[string]string{} // by name, then unit
	for _, block := range bytes.Split(data, []byte("\n\n")) {
		r := csv.NewReader(bytes.NewReader(block))
		r.FieldsPerRecord = -1
		recs, err := r.ReadAll()
		if err != nil {
			return fmt.Errorf("benchstat CSV: %w", err)
		}
		unit := ""
		for _, rec := range recs {
			switch {
			case len(rec) < 2:
			case rec[0] == "" && len(rec) >= 3 && rec[2] == "CI":
				unit = rec[1]
				if !slices.Contains(units, unit) {
					units = append(units, unit)
				}
			case rec[0] == "" || rec[0] == "geomean" || unit == "":
			default:
				name := benchName(rec[0])
				if cells[name] == nil {
					cells[name] = map[string]string{}
					names = append(names, name)
				}
				ci := ""
				if len(rec) >= 3 {
					ci = rec[2]
				}
				cells[name][unit] = value(rec[1], unit, ci)
			}
		}
	}
	if len(names) == 0 {
		return errors.New("the benchstat CSV has no benchmark")
	}
	units = orderUnits(units)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "| benchmark |")
	for _, u := range units {
		fmt.Fprintf(bw, " %s |", unitName(u))
	}
	fmt.Fprintf(bw, "\n|---|")
	for range units {
		fmt.Fprintf(bw, "---|")
	}
	fmt.Fprintln(bw)
	for _, n := range names {
		fmt.Fprintf(bw, "| %s |", cell(n))
		for _, u := range units {
			fmt.Fprintf(bw, " %s |", cells[n][u])
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}

// benchName drops the Benchmark prefix and the -GOMAXPROCS suffix.
func benchName(s string) string {
	s = strings.TrimPrefix(s, "Benchmark")
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			s = s[:i]
		}
	}
	return s
}

// orderUnits puts time first and the memory units last, the benchmarks'
// own metrics between them as they came.
func orderUnits(units []string) []string {
	rank := func(u string) int {
		switch u {
		case "sec/op":
			return 0
		case "B/op":
			return 2
		case "allocs/op":
			return 3
		}
		return 1
	}
	slices.SortStableFunc(units, func(a, b string) int { return rank(a) - rank(b) })
	return units
}

func unitName(u string) string {
	if u == "sec/op" {
		return "time/op"
	}
	return u
}

// value formats a median (seconds for sec/op) with benchstat's interval
// ("±3%", "±∞" with too few runs), omitted when it is ±0% or benchstat
// could not compute it ("?": a median of 0 among other values).
func value(v, unit, ci string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	var s string
	switch unit {
	case "sec/op":
		s = duration(f)
	case "B/op", "allocs/op":
		s = strconv.FormatFloat(f, 'f', -1, 64)
		if f >= 10 {
			s = fmt.Sprintf("%.0f", f)
		}
	default:
		s = strconv.FormatFloat(f, 'g', 4, 64)
	}
	if ci != "" && ci != "0%" && ci != "±0%" && ci != "?" {
		s += " ±" + strings.TrimPrefix(ci, "±")
	}
	return s
}

func duration(sec float64) string {
	switch ns := sec * 1e9; {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e4:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case ns >= 1e3:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	case ns >= 100:
		return fmt.Sprintf("%.0f ns", ns)
	default:
		return fmt.Sprintf("%.1f ns", ns)
	}
}
