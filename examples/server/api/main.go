package api

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

	"github.com/loadshed/loadshed/statuspage"
)

// Main runs the server with command-line args (see examples/server) and
// returns the process's exit code. examples/overload runs it as a child
// process of its own binary.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := fs.String("redis", "", "Redis address the fleet layer shares counts through (empty: this process alone, in memory)")
	instance := fs.String("instance", "", "this instance's name in the fleet (default: host and pid)")
	protect := fs.String("protect", string(Loadshed), "protection: none, blind-limit, loadshed (the default set-up) or loadshed-cpubound (tuned for one CPU, to compare)")
	globalRate := fs.Int64("global-rate", 0, "blind-limit's limit, requests per second for everybody")
	var down DownstreamConfig
	fs.IntVar(&down.Pool, "downstream-pool", 0, "every API request holds one of this many connections of a simulated downstream (0: none)")
	fs.DurationVar(&down.Latency, "downstream-latency", 0, "how long a downstream call holds its connection (0: the default, 30ms)")
	var ls LayerSettings
	fs.Int64Var(&ls.InFlight, "in-flight", 0, "loadshed-cpubound: requests running at once (0: the default, 8)")
	fs.DurationVar(&ls.QueueWait, "queue-wait", 0, "loadshed-cpubound: longest wait for an in-flight slot (0: the default, 500ms; negative: no queue)")
	fs.Int64Var(&ls.Workers, "workers", 0, "loadshed-cpubound: the worker layer's budget of non-critical requests running at once (0: the default, 4)")
	fs.Int64Var(&ls.BusyWorkers, "busy-workers", 0, "loadshed-cpubound: the worker budget while the worker layer sheds (0: the default, 1)")
	fs.DurationVar(&ls.WorkerQueueWait, "worker-queue-wait", 0, "loadshed-cpubound: longest wait for a worker over the worker budget (0: no queue, 503 at once)")
	fs.Float64Var(&ls.CPUFull, "cpu-full", 0, "loadshed-cpubound: share of the CPU budget the worker layer counts as saturation (0: the default, 1.25)")
	fs.DurationVar(&ls.SchedLatency, "sched-latency", 0, "loadshed-cpubound: Go scheduler latency the worker layer counts as saturation (0: the default, 20ms)")
	fleetPrefix := fs.String("fleet-prefix", "", "start of the fleet layer's Redis keys; instances sharing capacity share it (default: the fleet layer's)")
	fs.Int64Var(&ls.FleetPerInstance, "fleet-per-instance", 0, "loadshed with -redis: the fleet layer's capacity per live instance, requests in flight (0: the default, 10)")
	configFile := fs.String("config", "", "loadshed's layers from this file (e.g. examples/server/loadshed.yaml), reloaded when it changes or on SIGHUP; replaces the layer flags")
	quiet := fs.Bool("quiet", false, "no per-second log line")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the server to this file, until it stops (SIGINT, SIGTERM) or for -cpuprofile-for")
	profileFor := fs.Duration("cpuprofile-for", 0, "with -cpuprofile: profile only this long from the start (0: until the server stops; the overload demo kills its servers, so give one there)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *profileFor != 0 && *profile == "" {
		fmt.Fprintln(stderr, "server: -cpuprofile-for needs -cpuprofile")
		return 2
	}
	if *profile != "" {
		stopProfile, err := cpuProfile(*profile, *profileFor)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		defer func() {
			if err := stopProfile(); err != nil {
				fmt.Fprintln(stderr, "server: -cpuprofile:", err)
			}
		}()
	}
	p, err := ParseProtection(*protect)
	if err != nil {
		fmt.Fprintln(stderr, "server:", err)
		return 2
	}
	svc, err := New(Config{
		Protection:  p,
		GlobalRate:  *globalRate,
		Layers:      ls,
		Downstream:  down,
		Redis:       *redisAddr,
		Instance:    *instance,
		FleetPrefix: *fleetPrefix,
		ConfigFile:  *configFile,
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
	if svc.status != nil {
		fmt.Fprintf(stdout, "status page: http://%s%s\n", ln.Addr(), statuspage.Path)
	}

	stop := make(chan struct{})
	defer close(stop)
	if !*quiet {
		go svc.LogEvery(stdout, time.Second, stop)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	go func() {
		if err := svc.Watch(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(stderr, "server: watching the configuration:", err)
		}
	}()
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
