package loadshed_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmePrelude declares what README.md's Go blocks take as given: the
// packages they use, a router r, a context, and the values earlier prose
// builds (metrics, layers, a Redis client...).
const readmePrelude = `package readme

import (
	"context"
	"errors"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedgrpc"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/shedotel"
	"github.com/loadshed/loadshed/shedprom"
	"github.com/loadshed/loadshed/statuspage"
	"github.com/loadshed/loadshed/worker"
)

var (
	r       = chi.NewRouter()
	ctx     = context.Background()
	metrics shed.Observer
	layers  []shed.Layer
	limits  shed.Layer
	chain   *shed.Chain
	client  redis.UniversalClient
	addr    = "127.0.0.1:8080"
	mux     = http.NewServeMux()
)

func runJob(context.Context) error { return nil }
`

// readmeBlocks returns README.md's Go blocks, each with the line its code
// starts on.
func readmeBlocks(t *testing.T) (blocks []string, lines []int) {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var b *strings.Builder
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case b == nil && strings.TrimSpace(line) == "```go":
			b = new(strings.Builder)
			lines = append(lines, n+1)
		case b != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, b.String())
			b = nil
		case b != nil:
			b.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks, lines
}

// unusedName matches the compiler's complaints that a fragment cannot
// avoid: a block shows a value being built, not every later use of it.
var unusedName = regexp.MustCompile(`declared and not used|imported and not used`)

// Every Go block of README.md compiles against today's API, each as the
// body of a function of its own (errors point at README.md's lines), so
// that the README cannot drift from the code again.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package: not in -short")
	}
	blocks, lines := readmeBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	var src strings.Builder
	src.WriteString(readmePrelude)
	abs, err := filepath.Abs("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		fmt.Fprintf(&src, "\nfunc block%d() {\n//line %s:%d\n%s}\n", i+1, abs, lines[i], b)
	}
	// Inside the module, so that its go.mod resolves the imports; a
	// leading underscore keeps ./... from matching it meanwhile.
	dir, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "readme.go"), []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-gcflags=-e", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err == nil {
		return
	}
	var real []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" || strings.HasPrefix(l, "#") || unusedName.MatchString(l) {
			continue
		}
		real = append(real, l)
	}
	if len(real) > 0 {
		t.Errorf("README.md's Go blocks do not compile:\n%s", strings.Join(real, "\n"))
	}
}

// overloadRun is what TestReadmeResultsMatchOverloadRun reads of a
// scenario in docs/results/overload.json.
type overloadRun struct {
	Scenario string  `json:"scenario"`
	Capacity float64 `json:"capacity_per_second"`
	Steps    []struct {
		Setup      string  `json:"setup"`
		Load       float64 `json:"load"`
		Capacity   float64 `json:"capacity_per_second"`
		ByPriority map[string]struct {
			Success float64 `json:"success_rate"`
			Goodput float64 `json:"goodput_per_second"`
		} `json:"by_priority"`
		CriticalP99Ratio float64 `json:"critical_p99_over_floor"`
		AllP99Ratio      float64 `json:"all_p99_over_floor"`
		GoodputBound     float64 `json:"goodput_bound_per_second"`
		Trusted          bool    `json:"trusted"`
	} `json:"steps"`
}

// overloadRuns finds every scenario's run in v, a decoded overload.json,
// whatever holds them (one run, a list, a map by scenario, a field).
func overloadRuns(t *testing.T, v any) map[string]overloadRun {
	runs := map[string]overloadRun{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["scenario"].(string); ok {
				if _, ok := v["steps"]; ok {
					b, err := json.Marshal(v)
					if err != nil {
						t.Fatal(err)
					}
					var r overloadRun
					if err := json.Unmarshal(b, &r); err != nil {
						t.Fatalf("docs/results/overload.json: %v", err)
					}
					runs[r.Scenario] = r
					return
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return runs
}

// readmeResults returns the rows of README.md's results table, each a
// list of its cells, and the load its text says they are at.
func readmeResults(t *testing.T) (rows [][]string, load float64) {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Results\n")
	if !ok {
		t.Fatal("README.md has no Results section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	m := regexp.MustCompile(`At (\d+(?:\.\d+)?)x capacity`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal(`README.md's Results section does not say "At Nx capacity"`)
	}
	load, _ = strconv.ParseFloat(m[1], 64)
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| scenario") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "**", ""))
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatal("README.md's Results section has no table")
	}
	return rows, load
}

// leadingNumber is the first number of a cell ("95.2% (100% of...)",
// "1.26x", "cpu (471/s)" give 95.2, 1.26, 471) and the tolerance its
// printed digits allow: one unit of its last digit, and no coarser than a
// tenth, so that "100%" cannot stand for 99.6%.
var leadingNumber = regexp.MustCompile(`(\d+(?:\.(\d+))?)`)

func cellNumber(cell string) (v, tol float64, ok bool) {
	m := leadingNumber.FindStringSubmatch(cell)
	if m == nil {
		return 0, 0, false
	}
	v, _ = strconv.ParseFloat(m[1], 64)
	return v, math.Pow(10, -float64(max(len(m[2]), 1))), true
}

// readmeSetups maps README's set-up names to the demo's.
var readmeSetups = map[string]string{
	"no protection":      "none",
	"blind limit at 85%": "blind-limit",
	"loadshed default":   "loadshed",
}

// README.md's results table says what the overload run wrote: every cell
// of every row is the figure of docs/results/overload.json, to the digits
// README prints. The run writes that file; until it has, there is nothing
// to check against.
func TestReadmeResultsMatchOverloadRun(t *testing.T) {
	rows, load := readmeResults(t)
	b, err := os.ReadFile("docs/results/overload.json")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("docs/results/overload.json not written yet: go run ./examples/overload writes it")
	}
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("docs/results/overload.json: %v", err)
	}
	runs := overloadRuns(t, v)
	var scenario string
	for _, cells := range rows {
		if len(cells) != 7 {
			t.Errorf("README results row %q: want 7 cells", cells)
			continue
		}
		if cells[0] != "" {
			scenario = strings.Fields(cells[0])[0]
		}
		run, ok := runs[scenario]
		if !ok {
			t.Errorf("README shows scenario %q, docs/results/overload.json has no run of it", scenario)
			continue
		}
		if cells[0] != "" {
			if c, _, ok := cellNumber(cells[0]); ok && math.Abs(c-run.Capacity) > 1 {
				t.Errorf("%s: README's capacity %v/s, the run's %.1f/s", scenario, c, run.Capacity)
			}
		}
		// "²" marks a step the run flagged for a busy host.
		name, marked := strings.CutSuffix(cells[1], " ²")
		setup, ok := readmeSetups[name]
		if !ok {
			t.Errorf("README results row %q: unknown set-up %q", cells, cells[1])
			continue
		}
		found := false
		for _, s := range run.Steps {
			if s.Setup != setup || s.Load != load {
				continue
			}
			found = true
			if marked == s.Trusted {
				t.Errorf("%s, %s: README marks the step flagged %v, the run flagged it %v", scenario, cells[1], marked, !s.Trusted)
			}
			goodput, ofBound := 0.0, 0.0
			if s.Capacity > 0 {
				goodput = 100 * s.ByPriority["all"].Goodput / s.Capacity
			}
			if s.GoodputBound > 0 {
				// As the demo prints it: a goodput over the bound is all of it.
				ofBound = min(100, 100*s.ByPriority["all"].Goodput/s.GoodputBound)
			}
			for i, want := range []float64{
				100 * s.ByPriority["critical"].Success, goodput, ofBound, s.CriticalP99Ratio, s.AllP99Ratio,
			} {
				cell := cells[2+i]
				got, tol, ok := cellNumber(cell)
				if !ok { // "–": no figure, as the run has none (nothing answered)
					if want != 0 && i >= 3 {
						t.Errorf("%s, %s, column %d: README shows %q, the run %.3g", scenario, cells[1], i+3, cell, want)
					}
					continue
				}
				if math.Abs(got-want) > tol+1e-9 {
					t.Errorf("%s, %s, column %d: README shows %q, the run %.3g", scenario, cells[1], i+3, cell, want)
				}
			}
		}
		if !found {
			t.Errorf("%s, %s: docs/results/overload.json has no step at %vx", scenario, cells[1], load)
		}
	}
}

// projectText is the prose a user reads: README.md and docs/, not the
// generated results.
func projectText(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == filepath.Join("docs", "results") || (path != "." && path != "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Users have no access to the project's tracker or design notes, and a
// dated run in prose goes stale the day the code changes: the prose names
// neither, and figures live in docs/results/, written by the commands
// that measure them (README's one results table says its date).
func TestProseHasNoIssuesNotesOrDatedRuns(t *testing.T) {
	bad := regexp.MustCompile(`(?i)\bissues? #?\d+|\bissue #|DESIGN\.md|\b20\d\d-\d\d-\d\d\b|\d\d:\d\d UTC`)
	for path, text := range projectText(t) {
		if path == "README.md" {
			before, after, _ := strings.Cut(text, "\n## Results\n")
			_, after, _ = strings.Cut(after, "\n## ")
			text = before + "\n" + after
		}
		for n, line := range strings.Split(text, "\n") {
			if m := bad.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: no issue numbers, design notes or dated runs in prose (figures go to docs/results/)", path, n+1, m)
			}
		}
	}
}

// headingAnchor is the anchor GitHub gives a heading: lower case, without
// punctuation but '-' and '_', spaces as '-'.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link of README.md and docs/ (results included) names a
// file that exists and, with a fragment, a heading of that file: moving
// text between them must not leave a link behind.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("docs/results/*.md")
	files = append(append(files, more...), "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		if b, err := os.ReadFile(path); err == nil {
			for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
				a[headingAnchor(m[1])] = true
			}
		}
		anchors[path] = a
		return a
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			full := f
			if path != "" {
				full = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(full, ".md") && !anchorsOf(full)[frag] {
				t.Errorf("%s: link %q: %s has no such heading", f, target, full)
			}
		}
	}
}

// README.md is a guide a user reads in minutes: reference goes to docs/
// and figures to docs/results/, so that it stays short.
func TestReadmeFitsAGuide(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 350 {
		t.Errorf("README.md has %d lines, a guide at most 350: move reference to docs/", n)
	}
}
