// Command server runs the example payments API behind loadshed's layers
// (or, for comparison, behind nothing, or behind one priority-blind rate
// limit). It is the server examples/overload floods.
//
//	go run ./examples/server                       # 127.0.0.1:8080, in memory
//	go run ./examples/server -redis 127.0.0.1:6379 -instance a
//	go run ./examples/server -protect none         # no protection at all
//
// Routes: POST /v1/charges (critical), GET /v1/charges (default),
// GET /v1/reports (sheddable); any request with X-Test-Mode: true is
// test-mode traffic. The client is the X-API-Key header. ?work=2ms burns that
// much CPU (default 1ms). /healthz and /metrics are never shed.
//
// It prints its address on the first line, then one line per second: what it
// admitted and shed, by priority.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := fs.String("redis", "", "Redis address the fleet layer shares counts through (empty: this process alone, in memory)")
	instance := fs.String("instance", "", "this instance's name in the fleet (default: host and pid)")
	protect := fs.String("protect", string(api.Loadshed), "protection: none, blind-limit or loadshed")
	globalRate := fs.Int64("global-rate", 0, "blind-limit's limit, requests per second for everybody")
	inFlight := fs.Int64("in-flight", 0, "loadshed: requests running at once (0: default)")
	quiet := fs.Bool("quiet", false, "no per-second log line")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, err := api.ParseProtection(*protect)
	if err != nil {
		fmt.Fprintln(stderr, "server:", err)
		return 2
	}
	svc, err := api.New(api.Config{
		Protection: p,
		GlobalRate: *globalRate,
		Layers:     api.LayerSettings{InFlight: *inFlight},
		Redis:      *redisAddr,
		Instance:   *instance,
	})
	if err != nil {
		fmt.Fprintln(stderr, "server:", err)
		return 1
	}
	defer svc.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "server:", err)
		return 1
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s (protection %s)\n", ln.Addr(), p)

	stop := make(chan struct{})
	defer close(stop)
	if !*quiet {
		go svc.Stats().LogEvery(stdout, time.Second, stop)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "server:", err)
			return 1
		}
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}
	return 0
}
