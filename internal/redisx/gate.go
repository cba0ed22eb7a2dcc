package redisx

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/redis/go-redis/v9"
)

// Gate says whether the request path may use Redis. Healthy, every request
// may. After an outage (Failed), Redis is left alone for one interval; then
// exactly one request (the probe) may try it while the others keep deciding
// locally, and its outcome either ends the fallback (Answered) or starts
// another interval (Failed). A dead Redis thus costs one timeout per
// interval, not one per request.
//
// The zero Gate is not usable; make one with NewGate. It is safe for concurrent
// use and allocation-free.
type Gate struct {
	interval atomic.Int64 // ns
	down     atomic.Int64 // Unix ns until which Redis is left alone; 0 while healthy
	outages  atomic.Int64
}

// NewGate returns a healthy gate that leaves a failed Redis alone for interval
// (at least 1ns).
func NewGate(interval time.Duration) *Gate {
	g := &Gate{}
	g.interval.Store(max(int64(interval), 1))
	return g
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
	return now >= d && g.down.CompareAndSwap(d, now+g.interval.Load())
}

// Failed records an outage seen at now: Redis is left alone for one
// interval. It reports whether this began a fallback (Redis was healthy).
func (g *Gate) Failed(now int64) bool {
	if g.down.Swap(now+g.interval.Load()) == 0 {
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
func (g *Gate) Interval() time.Duration { return time.Duration(g.interval.Load()) }

// Down reports whether the gate is in fallback.
func (g *Gate) Down() bool { return g.down.Load() != 0 }

// Outages counts the fallbacks begun since NewGate.
func (g *Gate) Outages() int64 { return g.outages.Load() }

// Layers on one client share one Gate, so that a request passing several
// Redis-backed layers waits for a dead Redis once, not once per layer: the
// first layer to time out opens the gate's interval, and the layers after
// it decide locally at once. The gates are keyed by client and clock (a
// test's fake clock does not mix with the system clock), and counted, so
// that Release frees the last one.
var gates struct {
	mu sync.Mutex
	m  map[gateKey]*sharedGate
}

type gateKey struct {
	client redis.UniversalClient
	clock  shed.Clock
}

type sharedGate struct {
	gate *Gate
	refs int
}

// SharedGate returns the gate of client under clock, made on first use with
// interval; a later caller asking for a shorter interval shortens it, so
// the shared gate probes as often as its most eager layer asked. The layer
// calls release once, on Close. A clock whose type is not comparable gets
// a gate of its own.
func SharedGate(client redis.UniversalClient, clock shed.Clock, interval time.Duration) (g *Gate, release func()) {
	clock = shed.ClockOr(clock)
	if !reflect.TypeOf(client).Comparable() || !reflect.TypeOf(clock).Comparable() {
		return NewGate(interval), func() {}
	}
	k := gateKey{client, clock}
	gates.mu.Lock()
	defer gates.mu.Unlock()
	if gates.m == nil {
		gates.m = make(map[gateKey]*sharedGate)
	}
	s := gates.m[k]
	if s == nil {
		s = &sharedGate{gate: NewGate(interval)}
		gates.m[k] = s
	} else if iv := max(int64(interval), 1); iv < s.gate.interval.Load() {
		s.gate.interval.Store(iv)
	}
	s.refs++
	var once sync.Once
	return s.gate, func() {
		once.Do(func() {
			gates.mu.Lock()
			defer gates.mu.Unlock()
			if s.refs--; s.refs == 0 && gates.m[k] == s {
				delete(gates.m, k)
			}
		})
	}
}
