package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// DownstreamConfig describes the simulated downstream every API request
// calls: a pool of connections, each call holding one for Latency.
type DownstreamConfig struct {
	// Pool is how many calls the downstream takes at once (0: no
	// downstream). A call waits for a free connection, as a database/sql
	// pool makes it wait, until the request's context ends.
	Pool int
	// Latency is how long one call holds its connection at full speed
	// (default 30ms).
	Latency time.Duration
}

// MaxSlowdown bounds the factor /admin/downstream accepts.
const MaxSlowdown = 100

// downstream is the simulated pool. Its speed can change while it runs
// (POST /admin/downstream?slowdown=3): a call takes Latency × the slowdown
// in force when it gets its connection, as a database that slows down
// serves the queries it starts more slowly.
type downstream struct {
	conns    chan struct{}
	latency  time.Duration
	slowdown atomic.Uint64 // math.Float64bits of the factor
}

func newDownstream(c DownstreamConfig) (*downstream, error) {
	if c.Latency == 0 {
		c.Latency = 30 * time.Millisecond
	}
	if c.Latency < 0 || c.Latency > MaxWork {
		return nil, fmt.Errorf("api: Downstream.Latency must be in (0, %s], got %s", MaxWork, c.Latency)
	}
	d := &downstream{conns: make(chan struct{}, c.Pool), latency: c.Latency}
	d.slowdown.Store(math.Float64bits(1))
	return d, nil
}

// call holds a connection for the downstream's latency; it returns early,
// with the context's error, when ctx ends first.
func (d *downstream) call(ctx context.Context) error {
	select {
	case d.conns <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("api: waiting for a downstream connection: %w", ctx.Err())
	}
	defer func() { <-d.conns }()
	t := time.NewTimer(time.Duration(float64(d.latency) * math.Float64frombits(d.slowdown.Load())))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("api: calling the downstream: %w", ctx.Err())
	}
}

// setDownstream answers POST /admin/downstream?slowdown=F: from now on a
// downstream call takes F times its latency (1: full speed again). The
// overload demonstration uses it to take capacity away mid-flood.
func (s *Service) setDownstream(w http.ResponseWriter, r *http.Request) {
	if s.down == nil {
		http.Error(w, "this server has no downstream (-downstream-pool)", http.StatusNotFound)
		return
	}
	f, err := strconv.ParseFloat(r.URL.Query().Get("slowdown"), 64)
	if err != nil || !(f >= 1 && f <= MaxSlowdown) {
		http.Error(w, fmt.Sprintf("slowdown must be a factor in [1, %d]", MaxSlowdown), http.StatusBadRequest)
		return
	}
	s.down.slowdown.Store(math.Float64bits(f))
	w.WriteHeader(http.StatusNoContent)
}
