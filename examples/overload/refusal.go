package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/procstat"
)

// What refusing costs bounds goodput: a server reads every request it
// refuses and answers it, on the CPU its work needs, whatever decides to
// refuse it. So each scenario measures, in the same run and on the
// server's CPU, the least a refusal costs a one-CPU Go server, as
// bench/cmd/refusecost does: a server whose handler only writes a 503
// (net/http's least answer), pinned as the example server is, refuses
// refusalRate requests a second over kept-alive connections from the load
// generator's CPU, and its CPU time over the refusals made is the cost.
// Each step's goodput is then judged against capacity × (1 − refusals per
// second × that cost) (goodputBound), phase by phase where the capacity
// changed (boundWithChange).
const (
	refusalRate  = 4400 // requests a second: about what cpu refuses at 10×
	refusalConns = 128
)

// refuseEnv, set in a child's environment, makes this binary the server
// that refuses everything.
const refuseEnv = "LOADSHED_OVERLOAD_REFUSE"

// refuseIfChild serves 503 to every request but /healthz, and exits, when
// this process is a child started by measureRefusalCost.
func refuseIfChild() {
	if os.Getenv(refuseEnv) != "1" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "refuser:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	fmt.Fprintln(os.Stderr, "refuser:", srv.Serve(ln))
	os.Exit(1)
}

// measureRefusalCost starts the refusing server on the server's CPU and
// returns the least CPU per refusal of rounds rounds of d each.
func measureRefusalCost(ctx context.Context, pin pinning, logw io.Writer, rounds int, d time.Duration) (time.Duration, error) {
	var least time.Duration
	for range rounds {
		cost, err := refusalCostOnce(ctx, pin, logw, d)
		if err != nil {
			return 0, err
		}
		if least == 0 || cost < least {
			least = cost
		}
	}
	return least, nil
}

func refusalCostOnce(ctx context.Context, pin pinning, logw io.Writer, d time.Duration) (time.Duration, error) {
	srv, err := startChild(ctx, pin, "", refuseEnv+"=1", logw)
	if err != nil {
		return 0, fmt.Errorf("starting the refusing server: %w", err)
	}
	defer srv.stop()
	tr := &http.Transport{MaxIdleConns: refusalConns, MaxIdleConnsPerHost: refusalConns}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.base+"/v1/charges", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("the refusing server answered %s", resp.Status)
		}
		return nil
	}
	// Open the connections first: a connection's first request costs the
	// server an accept and a goroutine, which a flood's refusals over
	// connections already open do not.
	var wg sync.WaitGroup
	errs := make(chan error, refusalConns)
	for range refusalConns {
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
		return 0, err
	default:
	}
	before, ok := procstat.CPU(srv.cmd.Process.Pid)
	if !ok {
		return 0, errors.New("cannot read the refusing server's CPU time (no /proc)")
	}
	// /proc counts CPU time in clock ticks (10ms): on a busy machine, whose
	// generator sends less than asked, a round may add up to few of them,
	// so it goes on, up to four rounds, until the server has used
	// minRefusalCPU.
	var n int64
	used := time.Duration(0)
	for round := 0; round < 4 && used < minRefusalCPU; round++ {
		sent, err := refuseFor(ctx, get, d)
		if err != nil {
			return 0, err
		}
		n += sent
		after, _ := procstat.CPU(srv.cmd.Process.Pid)
		used = after - before
	}
	if n == 0 || used <= 0 {
		return 0, fmt.Errorf("%d requests refused in %s of the server's CPU: too few to measure", n, used)
	}
	return used / time.Duration(n), nil
}

// minRefusalCPU is the least server CPU time a measurement of the refusal
// cost adds up: 20 clock ticks, for a figure within 5%.
const minRefusalCPU = 20 * procstat.ClockTick

// refuseFor sends refusalRate requests a second with get for d, evenly
// over refusalConns senders, and returns how many were answered.
func refuseFor(ctx context.Context, get func() error, d time.Duration) (int64, error) {
	var (
		wg   sync.WaitGroup
		n    atomic.Int64
		errs = make(chan error, refusalConns)
	)
	start := time.Now()
	every := time.Second * refusalConns / refusalRate
	for i := range refusalConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each sender keeps its own pace, offset from the others.
			next := start.Add(time.Duration(i) * every / refusalConns)
			for ctx.Err() == nil {
				time.Sleep(time.Until(next))
				if time.Since(start) >= d {
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
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return n.Load(), ctx.Err()
}
