package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
)

// serveEnv, set in a child's environment, makes this binary the example
// server (api.Main) instead of the load generator: the demonstration needs
// no second build and no Go toolchain at run time.
const serveEnv = "LOADSHED_OVERLOAD_SERVE"

// serveIfChild runs the server and exits when this process is a child
// started by startServer.
func serveIfChild() {
	if os.Getenv(serveEnv) == "1" {
		os.Exit(api.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// pinning says which CPUs the server and the load generator run on.
type pinning struct {
	taskset   string // path of taskset; empty: no pinning
	serverCPU int
	loadCPU   int
	note      string // why there is no pinning, when there is none
}

// pinCPUs pins this process (the load generator) to one CPU and reserves
// another for the servers, so that neither steals the other's CPU. Without
// taskset or a second CPU it goes on unpinned and says so: the servers
// still get GOMAXPROCS=1, but the generator competes with them for CPU.
func pinCPUs() pinning {
	if runtime.GOOS != "linux" {
		return pinning{note: "no CPU pinning on " + runtime.GOOS}
	}
	cpus := allowedCPUs()
	if len(cpus) < 2 {
		return pinning{note: "only one CPU: server and load generator share it"}
	}
	path, err := exec.LookPath("taskset")
	if err != nil {
		return pinning{note: "taskset not found (util-linux): server and load generator are not pinned"}
	}
	pin := pinning{taskset: path, serverCPU: cpus[0], loadCPU: cpus[1]}
	// -a: every thread the runtime has started; threads started later
	// inherit the mask.
	out, err := exec.Command(path, "-a", "-p", "-c", strconv.Itoa(pin.loadCPU), strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return pinning{note: fmt.Sprintf("taskset failed (%v: %s): not pinned", err, strings.TrimSpace(string(out)))}
	}
	runtime.GOMAXPROCS(1)
	return pin
}

// allowedCPUs lists the first two CPUs this process may run on.
func allowedCPUs() []int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return firstCPUs(strings.TrimSpace(v), 2)
		}
	}
	return nil
}

// firstCPUs reads up to n CPUs from a CPU list ("0-3,8,10-11"); nil when
// the list is malformed.
func firstCPUs(list string, n int) []int {
	var cpus []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil
			}
		}
		for c := a; c <= b && len(cpus) < n; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// server is one example server running as a child process.
type server struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

// startServer starts the example server with args, on a free loopback
// port, one CPU's worth of Go scheduler (GOMAXPROCS=1) and, when pinning,
// on the server CPU: bin when set (a build of examples/server), else this
// binary. Its output goes to logw.
func startServer(ctx context.Context, pin pinning, bin string, logw io.Writer, args ...string) (*server, error) {
	return startChild(ctx, pin, bin, serveEnv+"=1", logw, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
}

// startChild starts bin (this binary when "") with args and env (KEY=value)
// as startServer does: it must print "listening on BASE" first and then
// answer GET /healthz.
func startChild(ctx context.Context, pin pinning, bin, env string, logw io.Writer, args ...string) (*server, error) {
	self := bin
	if self == "" {
		var err error
		self, err = os.Executable()
		if err != nil {
			return nil, fmt.Errorf("overload: finding this program to run it as the server: %w", err)
		}
	}
	var cmd *exec.Cmd
	if pin.taskset != "" {
		cmd = exec.Command(pin.taskset, append([]string{"-c", strconv.Itoa(pin.serverCPU), self}, args...)...)
	} else {
		cmd = exec.Command(self, args...)
	}
	cmd.Env = append(os.Environ(), env, "GOMAXPROCS=1")
	cmd.Stderr = logw
	setParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("overload: starting the server: %w", err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()

	lines := bufio.NewScanner(stdout)
	first := make(chan string, 1)
	go func() {
		if lines.Scan() {
			first <- lines.Text()
		}
		close(first)
		for lines.Scan() {
			fmt.Fprintln(logw, lines.Text())
		}
	}()
	select {
	case line, ok := <-first:
		fmt.Fprintln(logw, line)
		rest, found := strings.CutPrefix(line, "listening on ")
		if !ok || !found {
			s.stop()
			return nil, fmt.Errorf("overload: the server did not start (%q); see its log", line)
		}
		s.base, _, _ = strings.Cut(rest, " ")
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("overload: the server did not start within 30s")
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	return s, s.waitHealthy(ctx)
}

func (s *server) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := client.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("overload: the server at %s never answered /healthz", s.base)
}

// stop kills the server: nothing it holds is worth a graceful shutdown,
// and an unprotected one may have seconds of abandoned work queued.
func (s *server) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// scrape reads a server's /metrics into a map from series (name and labels,
// as written) to value.
func scrape(base string) (map[string]float64, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, lines.Err()
}
