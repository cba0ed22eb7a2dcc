// Command refusecost measures what refusing a request costs a Go HTTP
// server's one CPU: the least net/http spends reading a request and
// answering it 503, and what loadshed's refusal (its middleware, the
// Retry-After and problem document it writes) spends. docs/overload.md
// ("Reading the results") explains its use: at the refusal rate of
// the overload demonstration's 10x step they bound the goodput any
// middleware can reach there.
//
//	go run ./cmd/refusecost            # from bench/; about 25 seconds
//
// It starts a server process with GOMAXPROCS=1 pinned to one CPU
// (-server-cpu) that refuses every request, sends it -rate requests a
// second for -for over kept-alive connections from another CPU
// (-client-cpu), and reads the server's CPU time from /proc. The two kinds
// of server take turns, twice each, in the same run. Without taskset, or
// without /proc, it says so and stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/bench/internal/pinned"
	"github.com/loadshed/loadshed/internal/procstat"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

const serveEnv = "REFUSECOST_SERVE"

// The kinds of server.
const (
	bare     = "net/http" // WriteHeader(503): the least an answer costs
	loadshed = "loadshed" // shedhttp over a chain whose layer refuses all
)

func main() {
	rate := flag.Float64("rate", 4400, "requests a second (the demonstration refuses about 4,400 a second at 10x)")
	dur := flag.Duration("for", 5*time.Second, "how long each server is measured")
	capacity := flag.Float64("capacity", 483, "the demonstration's cpu capacity, requests a second (for the ceiling)")
	serverCPU := flag.Int("server-cpu", 0, "the CPU the server is pinned to")
	clientCPU := flag.Int("client-cpu", 1, "the CPU the client is pinned to")
	flag.Parse()
	pinned.Child("refusecost", serveEnv, serve)
	if err := run(*rate, *dur, *capacity, *serverCPU, *clientCPU); err != nil {
		fmt.Fprintln(os.Stderr, "refusecost:", err)
		os.Exit(1)
	}
}

// refuser is a layer that refuses every request as the worker layer does
// when it sheds.
type refuser struct{}

func (refuser) Name() string { return "worker" }

func (refuser) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	return shed.Lease{}, &shed.Rejection{Layer: "worker", Status: http.StatusServiceUnavailable, Reason: "overloaded", RetryAfter: time.Second}
}

// serve listens on a free loopback port, prints its address, and refuses
// every request.
func serve(kind string) error {
	var h http.Handler
	switch kind {
	case bare:
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	case loadshed:
		chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{refuser{}}})
		if err != nil {
			return err
		}
		mw, err := shedhttp.New(chain, shedhttp.Config{})
		if err != nil {
			return err
		}
		h = mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	default:
		return fmt.Errorf("unknown server %q", kind)
	}
	return pinned.Serve(h)
}

func run(rate float64, dur time.Duration, capacity float64, serverCPU, clientCPU int) error {
	taskset := pinned.Taskset()
	if taskset == "" {
		return errors.New("needs taskset and two CPUs: unpinned, the server's CPU time would mix with the client's")
	}
	if _, ok := procstat.CPU(os.Getpid()); !ok {
		return errors.New("needs /proc to read the server's CPU time")
	}
	if err := pinned.Pin(taskset, clientCPU); err != nil {
		return fmt.Errorf("pinning the client: %w", err)
	}
	fmt.Printf("server on CPU %d (GOMAXPROCS=1), client on CPU %d; %.0f requests/s for %s each, every one refused\n", serverCPU, clientCPU, rate, dur)
	fmt.Println("server     answered/s  server CPU  per refusal")
	cost := map[string][]time.Duration{}
	for range 2 {
		for _, kind := range []string{bare, loadshed} {
			r, err := measure(taskset, serverCPU, kind, rate, dur)
			if err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
			fmt.Printf("%-10s %-11.0f %-11s %.1fµs\n", kind, r.perSecond, fmt.Sprintf("%.1f%%", 100*r.cpuShare), float64(r.perRefusal)/1e3)
			cost[kind] = append(cost[kind], r.perRefusal)
		}
	}
	// What is left of the CPU for the handlers at 10x, where the server
	// serves about capacity and refuses the rest of 10 × capacity.
	refused := 9 * capacity
	fmt.Printf("at 10x of %.0f/s (about %.0f refused a second), the CPU left for the work served:\n", capacity, refused)
	for _, kind := range []string{bare, loadshed} {
		least := min(cost[kind][0], cost[kind][1])
		fmt.Printf("  %-10s %.1f%%\n", kind, 100*(1-refused*least.Seconds()))
	}
	return nil
}

type result struct {
	perSecond  float64
	cpuShare   float64
	perRefusal time.Duration
}

// measure starts one server and refuses rate requests a second on it for dur.
func measure(taskset string, serverCPU int, kind string, rate float64, dur time.Duration) (result, error) {
	srv, err := pinned.Start(taskset, serverCPU, serveEnv+"="+kind)
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()
	const conns = 128
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + srv.Addr + "/v1/charges"
	get := func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("answered %d, not 503", resp.StatusCode)
		}
		return nil
	}
	// Open the connections first: a connection's first request costs the
	// server an accept and a goroutine, which the steady state does not.
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := get(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return result{}, err
	default:
	}
	before, _ := procstat.CPU(srv.Pid)
	start := time.Now()
	var n atomic.Int64
	every := time.Duration(float64(conns) / rate * float64(time.Second))
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each sender keeps its own pace, offset from the others.
			next := start.Add(time.Duration(i) * every / conns)
			for {
				time.Sleep(time.Until(next))
				if time.Since(start) >= dur {
					return
				}
				if err := get(); err != nil {
					errs <- err
					return
				}
				n.Add(1)
				next = next.Add(every)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	after, _ := procstat.CPU(srv.Pid)
	select {
	case err := <-errs:
		return result{}, err
	default:
	}
	used := after - before
	return result{perSecond: float64(n.Load()) / wall.Seconds(), cpuShare: used.Seconds() / wall.Seconds(),
		perRefusal: used / time.Duration(max(n.Load(), 1))}, nil
}
