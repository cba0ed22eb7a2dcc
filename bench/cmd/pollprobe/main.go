// Command pollprobe measures how long a Go HTTP server whose one P is kept
// busy takes to answer a request that costs it nothing: the time a request
// waits before the runtime's network poller is asked whether it arrived.
// It bounds what the CPU-bound scenarios of docs/overload.md can reach.
//
//	go run ./cmd/pollprobe            # from bench/; about 10 seconds
//
// For each count of busy goroutines (-busy, each burning the CPU in 2ms
// slices, as the overload demonstration's handlers do), it starts a server
// process with GOMAXPROCS=1 pinned to one CPU (-server-cpu) and sends it
// -n sequential requests from another (-client-cpu), a few milliseconds
// apart, and prints the latency's percentiles. Without taskset it runs
// unpinned and says so.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/bench/internal/pinned"
)

const serveEnv = "POLLPROBE_SERVE"

func main() {
	busy := flag.String("busy", "0,1,2,4", "counts of busy goroutines in the server, comma-separated")
	n := flag.Int("n", 300, "requests per count")
	serverCPU := flag.Int("server-cpu", 0, "the CPU the server is pinned to")
	clientCPU := flag.Int("client-cpu", 1, "the CPU the client is pinned to")
	flag.Parse()
	pinned.Child("pollprobe", serveEnv, serve)
	if err := run(*busy, *n, *serverCPU, *clientCPU); err != nil {
		fmt.Fprintln(os.Stderr, "pollprobe:", err)
		os.Exit(1)
	}
}

// serve listens on a free loopback port, prints its address, and answers
// every request at once while the busy goroutines burn the CPU.
func serve(busy string) error {
	k, err := strconv.Atoi(busy)
	if err != nil {
		return fmt.Errorf("busy count %q: %w", busy, err)
	}
	for range k {
		go func() {
			for {
				for end := time.Now().Add(2 * time.Millisecond); time.Now().Before(end); {
				}
				runtime.Gosched()
			}
		}()
	}
	return pinned.Serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
}

func run(busy string, n, serverCPU, clientCPU int) error {
	taskset := pinned.Taskset()
	if taskset != "" {
		if err := pinned.Pin(taskset, clientCPU); err != nil {
			return fmt.Errorf("pinning the client: %w", err)
		}
		runtime.GOMAXPROCS(1)
		fmt.Printf("server on CPU %d, client on CPU %d, each GOMAXPROCS=1\n", serverCPU, clientCPU)
	} else {
		fmt.Println("not pinned (no taskset, or one CPU): the figures mix the server's and the client's time")
	}
	fmt.Println("busy goroutines   p50        p90        p99")
	for _, b := range strings.Split(busy, ",") {
		srv, err := pinned.Start(taskset, serverCPU, serveEnv+"="+strings.TrimSpace(b))
		if err != nil {
			return err
		}
		lat, err := probe(srv.Addr, n)
		srv.Stop()
		if err != nil {
			return fmt.Errorf("%s busy: %w", b, err)
		}
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Microsecond) }
		fmt.Printf("%-17s %-10v %-10v %v\n", b, q(0.5), q(0.9), q(0.99))
	}
	return nil
}

// probe times n requests to the server at addr.
func probe(addr string, n int) ([]time.Duration, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n+20; i++ {
		start := time.Now()
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i >= 20 { // the first ones open the connection and warm up
			lat = append(lat, time.Since(start))
		}
		time.Sleep(3 * time.Millisecond)
	}
	return lat, nil
}
