// Package redisgate holds what every Redis-backed layer needs to keep the
// request path off a Redis that is slow or gone: a Gate that, after an
// outage, lets one request per interval probe Redis while the others decide
// locally; the test of whether an error is an outage at all; and the check
// that a client honours context deadlines. The layers share it so that they
// fail over, and come back, the same way.
package redisgate

import (
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gate says whether the request path may use Redis. Healthy, every request
// may. After an outage (Failed), Redis is left alone for one interval; then
// exactly one request (the probe) may try it while the others keep deciding
// locally, and its outcome either ends the fallback (Answered) or starts
// another interval (Failed). A dead Redis thus costs one timeout per
// interval, not one per request.
//
// The zero Gate is not usable; make one with New. It is safe for concurrent
// use and allocation-free.
type Gate struct {
	interval int64        // ns
	down     atomic.Int64 // Unix ns until which Redis is left alone; 0 while healthy
	outages  atomic.Int64
}

// New returns a healthy gate that leaves a failed Redis alone for interval
// (at least 1ns).
func New(interval time.Duration) *Gate {
	return &Gate{interval: max(int64(interval), 1)}
}

// Try reports whether the request at now (Unix ns) may use Redis. While
// Redis is down it answers true to one request per interval: the probe,
// which must report back with Answered or Failed.
func (g *Gate) Try(now int64) bool {
	d := g.down.Load()
	if d == 0 {
		return true
	}
	// Moving the end of the interval forward makes this request the only
	// probe; the others stay local until it reports.
	return now >= d && g.down.CompareAndSwap(d, now+g.interval)
}

// Failed records an outage seen at now: Redis is left alone for one
// interval. It reports whether this began a fallback (Redis was healthy).
func (g *Gate) Failed(now int64) bool {
	if g.down.Swap(now+g.interval) == 0 {
		g.outages.Add(1)
		return true
	}
	return false
}

// Answered records that Redis answered (even with an error for one
// request): the fallback, if any, ends.
func (g *Gate) Answered() {
	if g.down.Load() != 0 {
		g.down.Store(0)
	}
}

// Interval is how long a failed Redis is left alone.
func (g *Gate) Interval() time.Duration { return time.Duration(g.interval) }

// Down reports whether the gate is in fallback.
func (g *Gate) Down() bool { return g.down.Load() != 0 }

// Outages counts the fallbacks begun since New.
func (g *Gate) Outages() int64 { return g.outages.Load() }

// IsOutage tells a Redis that is gone, slow or unable to serve (network
// errors, timeouts, a loading, busy or read-only server, a cluster that is
// down) from one that answered with an error for this request alone (say
// WRONGTYPE), which is no reason to stop asking it.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	for _, p := range [...]string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN", "NOREPLICAS", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Errors of CheckClient; callers wrap them with the name of their field.
var (
	// ErrNilClient: no client, or a typed nil one.
	ErrNilClient = errors.New("the redis client is nil")
	// ErrNoContextTimeout: the client ignores context deadlines, so a slow
	// Redis would hold requests for its ReadTimeout instead of the layer's
	// timeout.
	ErrNoContextTimeout = errors.New("the redis client's options must set ContextTimeoutEnabled, or go-redis ignores context deadlines and a slow Redis stalls requests for its ReadTimeout")
)

// CheckClient refuses a nil client (typed nil included) and the clients it
// can inspect (*redis.Client, *redis.ClusterClient, *redis.Ring) whose
// ContextTimeoutEnabled is off. Other implementations are taken on trust.
func CheckClient(c redis.UniversalClient) error {
	if c == nil {
		return ErrNilClient
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return ErrNilClient
	}
	var on bool
	switch c := c.(type) {
	case *redis.Client:
		on = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		on = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		on = c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	if !on {
		return ErrNoContextTimeout
	}
	return nil
}
