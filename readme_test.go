package loadshed_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedgrpc"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/shedotel"
	"github.com/loadshed/loadshed/shedprom"
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
