//go:build linux

package worker_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sys/unix"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

// The overload test: a server whose handlers burn 2ms of CPU, GOMAXPROCS=1
// and pinned to one CPU, offered several times its capacity by an open-loop
// client pinned to another, with and without the worker layer. It is long
// (about half a minute per set-up) and needs a quiet machine to mean much,
// so it runs only when asked:
//
//	go test ./worker -run Overload -overload -v
//	go test ./worker -run Overload -overload -overload.setups none,cpubound -overload.x 10 -v
//
// It floods the layer alone, on the CPU-bound service only. The scenarios
// the default set-up is judged by (CPU-bound, waiting on a downstream pool,
// a capacity drop, a noisy neighbour), each against a simulated floor on
// the same arrivals, are examples/overload's:
//
//	go test ./examples/overload -run Scenarios -overload -timeout 30m -v
var (
	overload       = flag.Bool("overload", false, "run the overload test (long; see overload_test.go)")
	overloadX      = flag.Float64("overload.x", 5, "offered load, in multiples of the measured capacity")
	overloadFor    = flag.Duration("overload.for", 5*time.Second, "how long each flood is measured, after 1s of warm-up")
	overloadWork   = flag.Duration("overload.work", 2*time.Millisecond, "CPU each request burns")
	overloadSetups = flag.String("overload.setups", "none,default,cpubound", "set-ups to flood, comma-separated: "+strings.Join(setupNames(), ", "))
)

// setups are the protections the test compares, built in the server
// process. nil means none.
var setups = map[string]func() (*worker.Layer, error){
	"none": nil,
	// The layer as it comes: CPU and scheduler latency, Stripe's thresholds.
	"default": func() (*worker.Layer, error) { return worker.New(worker.DefaultConfig()) },
	// What the package recommends for handlers that burn CPU.
	"cpubound": func() (*worker.Layer, error) { return worker.New(worker.CPUBound()) },
	// CPUBound with the scheduler latency target the demonstration uses.
	"cpubound-sched20": func() (*worker.Layer, error) {
		c := worker.CPUBound()
		c.SchedLatencyTarget = 20 * time.Millisecond
		return worker.New(c)
	},
	// CPUBound with the level moved by CPU alone: the budget does the rest.
	"cpubound-nosched": func() (*worker.Layer, error) {
		c := worker.CPUBound()
		c.SchedLatencyTarget = -1
		return worker.New(c)
	},
	// The worker budget without Yield.
	"budget": func() (*worker.Layer, error) {
		return worker.New(worker.Config{Interval: worker.DefaultInterval, Workers: int64(max(1, math.Round(worker.DetectBudget().CPUs)))})
	},
}

func setupNames() []string {
	var s []string
	for k := range setups {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

const serverEnv = "LOADSHED_WORKER_OVERLOAD_SERVER"

// priorities of the offered traffic: 10% critical, 40% default, 40%
// sheddable, 10% test-mode.
func pickPriority(r *rand.Rand) shed.Priority {
	switch x := r.IntN(10); {
	case x == 0:
		return shed.Critical
	case x < 5:
		return shed.Default
	case x < 9:
		return shed.Sheddable
	}
	return shed.TestMode
}

// burnCPU burns d of this thread's CPU time: the work stays the same when
// the CPU is taken away half-way, as real work does.
func burnCPU(d time.Duration) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	end := ts.Nano() + d.Nanoseconds()
	x := 0
	for {
		for i := 0; i < 2000; i++ {
			x += i ^ x
		}
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		if ts.Nano() >= end {
			break
		}
	}
	if x == 42 {
		runtime.KeepAlive(x)
	}
}

// TestOverloadServer is the server, run as a child process of
// TestOverload; it does nothing in an ordinary test run.
func TestOverloadServer(t *testing.T) {
	name, ok := os.LookupEnv(serverEnv)
	if !ok {
		t.Skip("the overload test's server; runs only as its child process")
	}
	var layer *worker.Layer
	var chain *shed.Chain
	if mk := setups[name]; mk != nil {
		var err error
		if layer, err = mk(); err != nil {
			t.Fatal(err)
		}
		defer layer.Close()
		if chain, err = shed.NewChain(shed.Config{Layers: []shed.Layer{layer}}); err != nil {
			t.Fatal(err)
		}
	}
	work, _ := time.ParseDuration(os.Getenv(serverEnv + "_WORK"))
	// A chi service; with a layer, behind shedhttp, which answers
	// rejections (503, Retry-After, problem+json) and reads the priority
	// from the X-Priority header.
	r := chi.NewRouter()
	if chain != nil {
		mw, err := shedhttp.New(chain, shedhttp.Config{
			Priority: func(r *http.Request, p shed.Priority) shed.Priority {
				if q, err := shed.ParsePriority(r.Header.Get("X-Priority")); err == nil {
					return q
				}
				return p
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Use(mw)
	}
	r.Get("/work", func(w http.ResponseWriter, r *http.Request) {
		burnCPU(work)
		w.WriteHeader(http.StatusOK)
	})
	var h http.Handler = r
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Printf("addr=%s gomaxprocs=%d\n", ln.Addr(), runtime.GOMAXPROCS(0))
	if layer != nil {
		fmt.Fprintf(os.Stderr, "budget %+v\n", layer.Budget())
		go func() {
			for range time.Tick(time.Second) {
				var b strings.Builder
				layer.ReportGauges(func(g layerkit.Gauge) {
					switch g.Name {
					case layerkit.GaugeUtilization:
						fmt.Fprintf(&b, " %s=%.2f", g.Signal, g.Value)
					case layerkit.GaugeShedLevel, layerkit.GaugeInFlight:
						fmt.Fprintf(&b, " %s=%.2f", g.Name, g.Value)
					}
				})
				fmt.Fprintln(os.Stderr, "server:"+b.String())
			}
		}()
	}
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	srv.Close()
}

// server is a running child server.
type server struct {
	cmd    *exec.Cmd
	addr   string
	stdin  io.WriteCloser
	stderr *strings.Builder
	mu     *sync.Mutex
}

func startServer(t *testing.T, setup string, cpu int) *server {
	t.Helper()
	args := []string{"-test.run=^TestOverloadServer$"}
	var cmd *exec.Cmd
	if cpu >= 0 {
		cmd = exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), os.Args[0]}, args...)...)
	} else {
		cmd = exec.Command(os.Args[0], args...)
	}
	cmd.Env = append(os.Environ(), serverEnv+"="+setup, serverEnv+"_WORK="+overloadWork.String(), "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stdin: stdin, stderr: &strings.Builder{}, mu: &sync.Mutex{}}
	cmd.Stderr = lockedWriter{s.stderr, s.mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("server %s: %v", setup, err)
	}
	for _, f := range strings.Fields(line) {
		if a, ok := strings.CutPrefix(f, "addr="); ok {
			s.addr = a
		}
	}
	go io.Copy(io.Discard, stdout)
	return s
}

func (s *server) stop() string {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// result is one request's fate.
type result struct {
	prio    shed.Priority
	status  int // 0: timed out or failed
	latency time.Duration
	at      time.Duration // since the flood began
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8192, DisableCompression: true,
		IdleConnTimeout: 30 * time.Second}}
}

func send(ctx context.Context, c *http.Client, addr string, p shed.Priority) (int, time.Duration) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/work", nil)
	req.Header.Set("X-Priority", p.String())
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, time.Since(start)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

const requestTimeout = time.Second

// flood offers rate requests a second, Poisson arrivals, for warm+measure,
// each with a 1s timeout, and returns what happened to those sent after
// warm. At most rate × timeout requests are out at once; an arrival beyond
// that counts as timed out without being sent.
func flood(c *http.Client, addr string, rate float64, warm, measure time.Duration) []result {
	rng := rand.New(rand.NewPCG(7, 11))
	maxOut := int(rate*requestTimeout.Seconds()) + 1
	sem := make(chan struct{}, maxOut)
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	start := time.Now()
	next := time.Duration(0)
	for next < warm+measure {
		next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if d := next - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		p := pickPriority(rng)
		at := next
		select {
		case sem <- struct{}{}:
		default:
			if at >= warm {
				mu.Lock()
				out = append(out, result{prio: p, at: at})
				mu.Unlock()
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			status, lat := send(ctx, c, addr, p)
			cancel()
			if at >= warm {
				mu.Lock()
				out = append(out, result{prio: p, status: status, latency: lat, at: at})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// summary is what the test reports of a set of results.
type summary struct {
	sent, ok     int
	critSent     int
	critOK       int
	p50, p99     time.Duration
	goodput      float64 // successes a second
	byPrio       [shed.NumPriorities][2]int
	rejected     int
	timedOut     int
	measuredOver time.Duration
}

func summarize(rs []result, over time.Duration) summary {
	s := summary{sent: len(rs), measuredOver: over}
	var lats []time.Duration
	for _, r := range rs {
		i := r.prio.Index()
		s.byPrio[i][0]++
		switch r.status {
		case http.StatusOK:
			s.ok++
			s.byPrio[i][1]++
			lats = append(lats, r.latency)
		case 0:
			s.timedOut++
		default:
			s.rejected++
		}
	}
	c := shed.Critical.Index()
	s.critSent, s.critOK = s.byPrio[c][0], s.byPrio[c][1]
	s.p50, s.p99 = percentile(lats, 0.5), percentile(lats, 0.99)
	s.goodput = float64(s.ok) / over.Seconds()
	return s
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(math.Ceil(q*float64(len(d))))-1)]
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func TestOverload(t *testing.T) {
	if !*overload {
		t.Skip("long: run with -overload (see overload_test.go)")
	}
	// The client on CPU 0, the server on CPU 1, when there are two.
	serverCPU := -1
	if runtime.NumCPU() >= 2 {
		if err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(os.Getpid())).Run(); err == nil {
			serverCPU = 1
		} else {
			t.Logf("taskset: %v: running unpinned", err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c := newClient()

	// Calibrate on an unprotected server: unloaded latency (one request at a
	// time) and capacity (eight clients in a closed loop).
	cal := startServer(t, "none", serverCPU)
	var unloaded []time.Duration
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		if st, lat := send(ctx, c, cal.addr, shed.Default); st == http.StatusOK {
			unloaded = append(unloaded, lat)
		}
		cancel()
	}
	var okN int
	var mu sync.Mutex
	var wg sync.WaitGroup
	capStart := time.Now()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(capStart) < 3*time.Second {
				ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
				if st, _ := send(ctx, c, cal.addr, shed.Default); st == http.StatusOK {
					mu.Lock()
					okN++
					mu.Unlock()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	capacity := float64(okN) / time.Since(capStart).Seconds()
	cal.stop()
	up50, up99 := percentile(unloaded, 0.5), percentile(unloaded, 0.99)
	rate := capacity * *overloadX
	t.Logf("server on CPU %d (GOMAXPROCS=1), work %v a request: unloaded p50 %v p99 %v; capacity %.0f/s; offering %.0f/s (%.1fx), 10%% critical, timeout %v",
		serverCPU, *overloadWork, up50.Round(10*time.Microsecond), up99.Round(10*time.Microsecond), capacity, rate, *overloadX, requestTimeout)

	got := map[string]summary{}
	for _, name := range strings.Split(*overloadSetups, ",") {
		if _, ok := setups[name]; !ok {
			t.Fatalf("unknown set-up %q (valid: %s)", name, strings.Join(setupNames(), ", "))
		}
		srv := startServer(t, name, serverCPU)
		rs := flood(c, srv.addr, rate, time.Second, *overloadFor)
		log := srv.stop()
		s := summarize(rs, *overloadFor)
		got[name] = s
		var by strings.Builder
		for _, p := range shed.Priorities() {
			n := s.byPrio[p.Index()]
			fmt.Fprintf(&by, " %s %.1f%%", p, pct(n[1], n[0]))
		}
		t.Logf("%-8s critical %5.1f%% (%d/%d) | p50 %v p99 %v (%.1fx unloaded p99) | goodput %.0f/s (%.0f%% of capacity) | 503 %d, timed out %d | success by priority:%s",
			name, pct(s.critOK, s.critSent), s.critOK, s.critSent, s.p50.Round(10*time.Microsecond), s.p99.Round(10*time.Microsecond),
			float64(s.p99)/float64(up99), s.goodput, 100*s.goodput/capacity, s.rejected, s.timedOut, by.String())
		mark := func(ok bool) string {
			if ok {
				return "met"
			}
			return "missed"
		}
		t.Logf("%-8s targets: critical >= 99.9%% %s, p99 <= 2x unloaded %s, goodput >= 90%% of capacity %s", name,
			mark(pct(s.critOK, s.critSent) >= 99.9), mark(s.ok > 0 && s.p99 <= 2*up99), mark(s.goodput >= 0.9*capacity))
		if testing.Verbose() {
			t.Logf("%s server log:\n%s", name, log)
		}
	}
	// Orderings only: absolute figures depend on the machine.
	if none, ok := got["none"]; ok {
		for name, s := range got {
			if name == "none" {
				continue
			}
			if pct(s.critOK, s.critSent) < pct(none.critOK, none.critSent) {
				t.Errorf("%s: critical success %.1f%%, below no protection's %.1f%%", name, pct(s.critOK, s.critSent), pct(none.critOK, none.critSent))
			}
		}
	}
}
