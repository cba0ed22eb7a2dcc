package main

// loadshed serve: Envoy's Rate Limit Service from a loadshed file or a
// directory of envoyproxy/ratelimit files (package rls), over gRPC and
// JSON, with health and Prometheus metrics.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/loadshed/loadshed/internal/telemetry"
	"github.com/loadshed/loadshed/rls"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/statuspage"
)

const serveUsage = `usage: loadshed serve -config PATH [flags]

Serves Envoy's Rate Limit Service (envoy.service.ratelimit.v3) from the
ratelimit sections of a loadshed file, or from a directory (or one file) of
envoyproxy/ratelimit configuration. Counts are in memory unless -redis is
given. The configuration reloads when it changes and on SIGHUP; a file with
an error is refused and the running rules keep serving.

Every flag may also be set by the environment variable named in brackets.
`

// serveFlags are the command's settings.
type serveFlags struct {
	config, grpcAddr, httpAddr string
	redis, redisMaster         string
	headers, legacyHeaders     bool
	watch                      bool
	maxMsgBytes                int
	maxStreams                 int
	grpcWorkers                int
	maxDescriptors             int
	redisTimeout               time.Duration
	batch                      float64
	pipeline                   int
}

func parseServe(args []string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(env, def), help+" ["+env+"]")
	}
	str(&f.config, "config", "LOADSHED_CONFIG", "", "a loadshed file, or a directory or file of envoyproxy/ratelimit configuration")
	str(&f.grpcAddr, "grpc-addr", "LOADSHED_GRPC_ADDR", "127.0.0.1:8081", "gRPC listen address (ShouldRateLimit, grpc.health.v1, reflection)")
	str(&f.httpAddr, "http-addr", "LOADSHED_HTTP_ADDR", "127.0.0.1:8080", "HTTP listen address (POST /json, /healthz, /metrics)")
	str(&f.redis, "redis", "LOADSHED_REDIS", "", "Redis address; several, comma-separated, for a Cluster (or Sentinels with -redis-master); empty: counts in memory. The password comes from LOADSHED_REDIS_PASSWORD")
	str(&f.redisMaster, "redis-master", "LOADSHED_REDIS_MASTER", "", "Sentinel master group name")
	boolean := func(p *bool, name, env string, def bool, help string) {
		v := def
		if s := os.Getenv(env); s != "" {
			v, _ = strconv.ParseBool(s)
		}
		fs.BoolVar(p, name, v, help+" ["+env+"]")
	}
	boolean(&f.headers, "headers", "LOADSHED_HEADERS", false, "add the RateLimit and RateLimit-Policy fields to response_headers_to_add")
	boolean(&f.legacyHeaders, "legacy-headers", "LOADSHED_LEGACY_HEADERS", false, "add x-ratelimit-limit, -remaining and -reset, as envoyproxy/ratelimit does")
	boolean(&f.watch, "watch", "LOADSHED_WATCH", true, "reload the configuration when it changes")
	integer := func(p *int, name, env string, def int, help string) {
		v := def
		if s := os.Getenv(env); s != "" {
			v, _ = strconv.Atoi(s)
		}
		fs.IntVar(p, name, v, help+" ["+env+"]")
	}
	integer(&f.maxMsgBytes, "max-msg-bytes", "LOADSHED_MAX_MSG_BYTES", 1<<20, "largest request accepted, gRPC message or JSON body")
	integer(&f.maxStreams, "max-streams", "LOADSHED_MAX_STREAMS", 1000, "most concurrent gRPC streams per connection")
	integer(&f.grpcWorkers, "grpc-workers", "LOADSHED_GRPC_WORKERS", 128, "goroutines kept to run gRPC calls, whose stacks have grown once (0: a new goroutine per call); a call finding none idle gets a new one")
	integer(&f.maxDescriptors, "max-descriptors", "LOADSHED_MAX_DESCRIPTORS", rls.DefaultMaxDescriptors, "most descriptors in one request")
	fs.DurationVar(&f.redisTimeout, "redis-timeout", envDuration("LOADSHED_REDIS_TIMEOUT", 0), "one decision's Redis round trip; past it the local share decides (default the store's) [LOADSHED_REDIS_TIMEOUT]")
	integer(&f.pipeline, "pipeline", "LOADSHED_PIPELINE", -1, "Redis: send concurrent decisions' scripts together, on this many connections at once (0: one round trip each; default 4 on a single node, 0 on a Cluster or Sentinel, whose retries pipelining turns off)")
	fs.Float64Var(&f.batch, "batch", envFloat("LOADSHED_BATCH", 0), "batched mode: lease this fraction of each limit per round trip (0: exact) [LOADSHED_BATCH]")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.config == "" {
		fmt.Fprint(stderr, "loadshed serve: -config is required\n")
		fs.Usage()
		return nil, flag.ErrHelp
	}
	return f, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
		return v
	}
	return def
}

func serve(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveContext(ctx, args, stderr, func(grpcAddr, httpAddr net.Addr) {
		fmt.Fprintf(stdout, "loadshed serve: gRPC on %s, HTTP on %s (status page: http://%s%s)\n", grpcAddr, httpAddr, httpAddr, statuspage.Path)
	})
}

// serveContext runs the service until ctx ends; ready is told the
// addresses listened on.
func serveContext(ctx context.Context, args []string, stderr io.Writer, ready func(grpcAddr, httpAddr net.Addr)) int {
	f, err := parseServe(args, stderr)
	if err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	domains, err := rls.Load(f.config)
	if err != nil {
		printErrors(stderr, f.config, err)
		return 1
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The library's decision counter, same name and labels; the service
	// holds no lease, so none of the lease series.
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: telemetry.Requests.Prom, Help: telemetry.Requests.Help}, telemetry.Requests.Labels)
	reg.MustRegister(decisions)
	metrics := shed.ObserverFunc(func(e shed.Event) {
		decisions.WithLabelValues(telemetry.DecisionOf(e).RequestLabels()...).Inc()
	})
	responses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loadshed_rls_responses_total",
		Help: "ShouldRateLimit responses by domain (" + rls.UnknownDomain + " for domains the rules lack) and overall code.",
	}, []string{"domain", "code"})
	reg.MustRegister(responses)

	// The status page's recorder learns each domain ("rls:<domain>") from
	// its decisions; the rules and reloads are read from the server when
	// the page is.
	var srv *rls.Server
	page, err := shedstatus.New(shedstatus.Config{
		Rules:  func() []shedstatus.Rule { return rulesOf(srv) },
		Reload: func() shedstatus.Reload { return reloadOf(srv) },
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer page.Close()

	cfg := rls.Config{
		Domains: domains, RateLimitHeaders: f.headers, LegacyHeaders: f.legacyHeaders,
		MaxDescriptors: f.maxDescriptors, Observer: shed.Observers{metrics, page}, Logger: logger,
		OnResponse: func(domain string, code pb.RateLimitResponse_Code) {
			responses.WithLabelValues(domain, strings.ToLower(code.String())).Inc()
		},
	}
	if f.redis != "" {
		// The store's own timeout ends a call first; the socket's is a
		// backstop past it.
		sock := max(200*time.Millisecond, 2*f.redisTimeout)
		opts := &redis.UniversalOptions{
			Addrs: strings.Split(f.redis, ","), MasterName: f.redisMaster,
			Password: os.Getenv("LOADSHED_REDIS_PASSWORD"), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, ReadTimeout: sock, WriteTimeout: sock,
		}
		if f.pipeline < 0 {
			f.pipeline = 0
			if len(opts.Addrs) == 1 && opts.MasterName == "" {
				f.pipeline = 4
			}
		}
		if f.pipeline > 0 {
			opts.MaxRetries = -1 // a pipeline re-sent would run its scripts twice
		}
		client := redis.NewUniversalClient(opts)
		defer client.Close()
		if f.pipeline > 0 {
			defer rls.Pipeline(client, f.pipeline)()
		}
		cfg.Redis = client
		cfg.RedisStore.Timeout = f.redisTimeout
		cfg.RedisStore.Batch.Fraction = f.batch
	}
	srv, err = rls.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer srv.Close()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "loadshed_rls_reloads_applied_total", Help: "Configuration reloads applied.",
	}, func() float64 { a, _ := srv.ReloadStats(); return float64(a) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "loadshed_rls_reloads_refused_total", Help: "Configuration reloads refused (the running rules kept serving).",
	}, func() float64 { _, r := srv.ReloadStats(); return float64(r) }))

	gl, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		fmt.Fprintf(stderr, "loadshed serve: %v\n", err)
		return 1
	}
	hl, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		gl.Close()
		fmt.Fprintf(stderr, "loadshed serve: %v\n", err)
		return 1
	}
	// Each connection holds at most max-streams calls, each at most
	// max-msg-bytes; a peer that stops reading stalls only its own streams
	// (HTTP/2 flow control), and one that is gone is found by keepalive.
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(f.maxMsgBytes),
		grpc.MaxConcurrentStreams(uint32(max(f.maxStreams, 1))),
		// A new goroutine per call grows its stack on every call (runtime
		// copystack was 16 % of the service's CPU in exact mode, measured
		// with pprof); kept workers have grown theirs already. Not too
		// many, though: idle workers take calls in turn, and the garbage
		// collector shrinks the stack of each one idle when it runs, so
		// the more workers, the more calls grow a stack again (128 against
		// 256: +3.7 % decisions/s at 64 in flight, +5.0 % at 128;
		// docs/benchmarks.md).
		grpc.NumStreamWorkers(uint32(max(f.grpcWorkers, 0))),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	pb.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	mux := http.NewServeMux()
	mux.Handle("/json", srv.JSONHandler(int64(f.maxMsgBytes)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK\n") })
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Read-only, but it tells what is limited and how much: the HTTP port
	// belongs on an admin network (the default address is loopback).
	mux.Handle("GET "+statuspage.Path, statuspage.New(page, statuspage.Options{Title: "loadshed serve"}))
	mux.Handle("GET /{$}", http.RedirectHandler(statuspage.Path, http.StatusFound))
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- httpSrv.Serve(hl) }()
	if f.watch {
		go func() {
			if err := srv.Watch(ctx, f.config); err != nil && !errors.Is(err, context.Canceled) {
				logger.Error("loadshed serve: not watching the configuration", "err", err)
			}
		}()
	}
	logger.Info("loadshed serve: serving", "config", f.config, "domains", srv.Domains(), "grpc", gl.Addr().String(), "http", hl.Addr().String(), "redis", f.redis != "")
	if ready != nil {
		ready(gl.Addr(), hl.Addr())
	}
	status := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(stderr, "loadshed serve: %v\n", err)
		status = 1
	}
	hs.Shutdown()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	httpSrv.Shutdown(shutdown)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutdown.Done():
		gs.Stop()
	}
	return status
}

// rulesOf lists srv's running rules for the status page, as
// envoyproxy/ratelimit's /rlconfig does, with their counts.
func rulesOf(srv *rls.Server) []shedstatus.Rule {
	if srv == nil {
		return nil
	}
	rs := srv.Rules()
	out := make([]shedstatus.Rule, len(rs))
	for i, r := range rs {
		out[i] = shedstatus.Rule{Key: r.Key, Limit: r.Limit, Shadow: r.Shadow, Hits: r.Hits, OverLimit: r.OverLimit, NearLimit: r.NearLimit}
	}
	return out
}

// reloadOf is what the status page says of reloads: how many were applied
// and refused. The last one's time and error go in Time and Error once the
// server reports them.
func reloadOf(srv *rls.Server) shedstatus.Reload {
	if srv == nil {
		return shedstatus.Reload{}
	}
	applied, refused := srv.ReloadStats()
	return shedstatus.Reload{Applied: applied, Refused: refused}
}
