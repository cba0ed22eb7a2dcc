package redisx

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
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
//
// On a Redis Cluster the gate is kept per master node (TryKey, FailedKey,
// AnsweredKey): a node that stops answering sends only the keys of its
// slots to the fallback, and every failure asks the client to reload its
// slot map, so that the keys come back to Redis as soon as the map names
// the replica promoted in the dead node's place.
type Gate struct {
	interval atomic.Int64 // ns
	down     atomic.Int64 // Unix ns until which Redis is left alone; 0 while healthy
	outages  atomic.Int64

	// On a Cluster: the gate of each node that failed, by address. nodesDown
	// counts those in fallback, so that a healthy cluster costs TryKey one
	// atomic load.
	cluster   *redis.ClusterClient
	nodesDown atomic.Int32
	mu        sync.Mutex
	nodes     map[string]*nodeGate
}

// nodeGate is one Cluster node's part of a Gate.
type nodeGate struct {
	down atomic.Int64 // as Gate.down
}

// NewGate returns a healthy gate that leaves a failed Redis alone for interval
// (at least 1ns).
func NewGate(interval time.Duration) *Gate {
	g := &Gate{}
	g.interval.Store(max(int64(interval), 1))
	return g
}

// NewClientGate is NewGate for the layers on client: per node when client
// is a Cluster client, whole otherwise.
func NewClientGate(client redis.UniversalClient, interval time.Duration) *Gate {
	g := NewGate(interval)
	if c, ok := client.(*redis.ClusterClient); ok {
		g.cluster = c
		g.nodes = make(map[string]*nodeGate)
	}
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

// Down reports whether the gate (or, on a Cluster, one node's) is in
// fallback.
func (g *Gate) Down() bool { return g.down.Load() != 0 || g.nodesDown.Load() > 0 }

// TryKey is Try for a request on the Redis key key: on a Cluster, the gate
// of the node serving key's slot decides.
func (g *Gate) TryKey(now int64, key string) bool {
	if g.cluster == nil {
		return g.Try(now)
	}
	if g.nodesDown.Load() == 0 {
		return true
	}
	n := g.node(key)
	if n == nil {
		return true
	}
	d := n.down.Load()
	if d == 0 {
		return true
	}
	return now >= d && n.down.CompareAndSwap(d, now+g.interval.Load())
}

// FailedKey is Failed for a request on key: on a Cluster it sends the
// node serving key's slot (as the client's slot map has it) to the
// fallback, and has the slot map reloaded.
func (g *Gate) FailedKey(now int64, key string) bool {
	if g.cluster == nil {
		return g.Failed(now)
	}
	Reload(g.cluster)
	addr, ok := g.addrOf(key)
	if !ok {
		return g.Failed(now)
	}
	// Under the lock, so that AnsweredKey cannot forget the node between
	// its lookup and its marking (nodesDown would then count it forever).
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[addr]
	if n == nil {
		n = &nodeGate{}
		g.nodes[addr] = n
	}
	if n.down.Swap(now+g.interval.Load()) == 0 {
		g.nodesDown.Add(1)
		g.outages.Add(1)
		return true
	}
	return false
}

// AnsweredKey is Answered for a request on key. On a Cluster it ends the
// fallback of the node serving key's slot, and forgets the nodes left in
// fallback that no request has probed for two intervals: no slot leads to
// them any more (a failed master whose replica took its slots).
func (g *Gate) AnsweredKey(now int64, key string) {
	if g.cluster == nil {
		g.Answered()
		return
	}
	if g.nodesDown.Load() == 0 {
		return
	}
	if n := g.node(key); n != nil && n.down.Load() != 0 && n.down.Swap(0) != 0 {
		g.nodesDown.Add(-1)
	}
	stale := now - g.interval.Load() // a probe was due an interval ago
	g.mu.Lock()
	for addr, n := range g.nodes {
		if d := n.down.Load(); d != 0 && d < stale && n.down.CompareAndSwap(d, 0) {
			g.nodesDown.Add(-1)
			delete(g.nodes, addr)
		}
	}
	g.mu.Unlock()
}

// node returns the gate of the master serving key's slot in the client's
// slot map, nil when it has none.
func (g *Gate) node(key string) *nodeGate {
	addr, ok := g.addrOf(key)
	if !ok {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nodes[addr]
}

// addrOf returns the address of the master serving key's slot in the
// client's slot map.
func (g *Gate) addrOf(key string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), nodeLookupTimeout)
	defer cancel()
	c, err := g.cluster.MasterForKey(ctx, key)
	if err != nil {
		return "", false
	}
	return c.Options().Addr, true
}

// nodeLookupTimeout bounds the wait for a slot map when the client has none
// yet (it has one as soon as any command ran).
const nodeLookupTimeout = 50 * time.Millisecond

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
	clock = clockx.Or(clock)
	if !reflect.TypeOf(client).Comparable() || !reflect.TypeOf(clock).Comparable() {
		return NewClientGate(client, interval), func() {}
	}
	k := gateKey{client, clock}
	gates.mu.Lock()
	defer gates.mu.Unlock()
	if gates.m == nil {
		gates.m = make(map[gateKey]*sharedGate)
	}
	s := gates.m[k]
	if s == nil {
		s = &sharedGate{gate: NewClientGate(client, interval)}
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
