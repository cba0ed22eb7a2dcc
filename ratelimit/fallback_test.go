package ratelimit

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// bounded fails the test when one decision took longer than the store's
// timeout allows (plus room for a slow, race-instrumented machine): the
// point of the fallback is that Redis trouble never stalls a request.
func withinTimeout(t *testing.T, took time.Duration, timeout time.Duration) {
	t.Helper()
	if limit := timeout + 750*time.Millisecond; took > limit {
		t.Fatalf("decision took %v, more than the %v timeout allows", took, timeout)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRedisFallbackUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	var falls atomic.Int64
	limit := Limit{Quantity: 8, Period: time.Minute, Burst: 8}
	for _, alg := range allAlgs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := shedtest.NewClock(contractStart)
			r, err := NewRedis(c, alg, limit, RedisConfig{ExpectedInstances: 4, Clock: clk,
				OnFallback: func(error) { falls.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			falls.Store(0)
			// This instance's share: 8 / 4 = 2 units.
			for i, want := range []bool{true, true, false} {
				start := time.Now()
				res, fb, err := r.Decide(bg, "k", 1)
				withinTimeout(t, time.Since(start), DefaultRedisTimeout)
				if err != nil || !fb || res.Allowed != want {
					t.Fatalf("request %d: %+v fallback=%v err=%v; want allowed=%v from the fallback", i, res, fb, err, want)
				}
			}
			// A cost the whole limit admits but the share cannot is refused
			// as over the limit, not as an error.
			res, fb, err := r.Decide(bg, "other", 3)
			if err != nil || !fb || res.Allowed || res.RetryAfter <= 0 {
				t.Fatalf("cost above the share: %+v fallback=%v err=%v", res, fb, err)
			}
			// Allow hides the fallback behind a plain answer: never an error.
			if _, err := r.Allow(bg, "k", 1); err != nil {
				t.Fatalf("Allow during fallback: %v", err)
			}
			// Refunds go to the fallback too.
			if err := r.Refund(bg, "k", 1); err != nil {
				t.Fatal(err)
			}
			if res, _, _ := r.Decide(bg, "k", 1); !res.Allowed {
				t.Fatalf("after a refund the fallback still denies: %+v", res)
			}
			if falls.Load() != 6 {
				t.Fatalf("OnFallback called %d times, want 6", falls.Load())
			}
		})
	}
}

// stallProxy relays TCP to a Redis server and can stop relaying (the server
// seems to hang: connections stay open, nothing answers) and resume.
type stallProxy struct {
	ln     net.Listener
	target string
	done   chan struct{}

	mu    sync.Mutex
	gate  chan struct{} // closed while relaying
	conns []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, done: make(chan struct{}), gate: make(chan struct{})}
	close(p.gate)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *stallProxy) close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *stallProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			select {
			case <-gate:
			case <-p.done:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A Redis that stops answering costs one timeout, then the store decides
// locally without asking it until the probe interval has passed; one
// request then probes, and the store is back on Redis once it answers.
func TestRedisFallbackStalledAndBack(t *testing.T) {
	proxy := newStallProxy(t, redistest.Addr(t))
	redistest.Client(t)
	c := redis.NewClient(&redis.Options{Addr: proxy.addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	cmds := &commandCounter{}
	c.AddHook(cmds)
	clk := shedtest.NewClock(contractStart)
	const timeout = 60 * time.Millisecond
	const probe = time.Second
	r, err := NewRedis(c, FixedWindow, PerHour(10), RedisConfig{Prefix: testPrefix(t), Clock: clk,
		Timeout: timeout, ProbeInterval: probe, ExpectedInstances: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	decide := func(wantFallback bool) Result {
		t.Helper()
		start := time.Now()
		res, fb, err := r.Decide(bg, "k", 1)
		withinTimeout(t, time.Since(start), timeout)
		if err != nil || fb != wantFallback {
			t.Fatalf("Decide = %+v fallback=%v err=%v; want fallback=%v", res, fb, err, wantFallback)
		}
		return res
	}

	if res := decide(false); res.Remaining != 9 {
		t.Fatalf("healthy: %+v", res)
	}
	proxy.stall()
	decide(true) // waits one timeout
	before := cmds.n.Load()
	for i := 0; i < 5; i++ {
		clk.Advance(probe / 10)
		decide(true)
	}
	if n := cmds.n.Load() - before; n != 0 {
		t.Fatalf("%d commands sent to a Redis that failed within the probe interval, want 0", n)
	}
	// The probe interval has passed: one request tries Redis, still stalled.
	clk.Advance(probe)
	decide(true)
	if n := cmds.n.Load() - before; n < 1 {
		t.Fatal("no probe after the probe interval")
	}
	before = cmds.n.Load()
	decide(true)
	if n := cmds.n.Load() - before; n != 0 {
		t.Fatalf("a failed probe did not restart the interval: %d commands", n)
	}

	proxy.resume()
	clk.Advance(probe)
	// Back on Redis, which kept its count: the first unit, then this one.
	// Back on Redis, which kept its count: 8 left, or fewer when the
	// requests that timed out reached the server once it was relayed
	// again, as a timed-out command may. The fallback's share (2) would
	// leave at most 1.
	if res := decide(false); res.Remaining < 6 || res.Remaining > 8 {
		t.Fatalf("back on Redis: %+v, want the shared count (6 to 8 left)", res)
	}
	decide(false)
}

// A server that answers with an error for one key (here a key of the
// store's clobbered with a string) is not down: that request falls back,
// the next ones go to Redis as before.
func TestRedisFallbackServerErrorIsNotOutage(t *testing.T) {
	c, cmds := countedClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, TokenBucket, PerSecond(5), RedisConfig{OnFallback: func(error) {}})
	if err := c.Set(bg, r.keyOf("clobbered"), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, fb, err := r.Decide(bg, "clobbered", 1); err != nil || !fb {
		t.Fatalf("WRONGTYPE: fallback=%v err=%v; want a fallback decision", fb, err)
	}
	before := cmds.n.Load()
	if res, fb, err := r.Decide(bg, "fine", 1); err != nil || fb || !res.Allowed {
		t.Fatalf("next key: %+v fallback=%v err=%v; want Redis to decide", res, fb, err)
	}
	if cmds.n.Load() == before {
		t.Fatal("the next decision did not go to Redis")
	}
}

// A server paused with CLIENT PAUSE WRITE (as during a failover; ALL would
// pause the UNPAUSE too on Redis 7.0) makes the store
// fall back within its timeout; once unpaused, the store returns to it.
func TestRedisFallbackPausedServer(t *testing.T) {
	addr := startRedis(t, redisReady)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	clk := shedtest.NewClock(contractStart)
	const timeout = 50 * time.Millisecond
	r, err := NewRedis(c, SlidingLog, PerMinute(3), RedisConfig{Clock: clk, Timeout: timeout, ProbeInterval: time.Second,
		ExpectedInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The connection open and the script loaded first: on a loaded machine
	// they can take the whole 50ms timeout.
	if err := c.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.script.Load(bg, c); err != nil {
		t.Fatal(err)
	}
	if res, fb, err := r.Decide(bg, "k", 1); err != nil || fb || res.Remaining != 2 {
		t.Fatalf("healthy: %+v fallback=%v err=%v", res, fb, err)
	}
	// Bounded: the pause ends by itself after 10s even if the test dies.
	if err := admin.Do(bg, "CLIENT", "PAUSE", "10000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, fb, err := r.Decide(bg, "k", 1)
	withinTimeout(t, time.Since(start), timeout)
	if err != nil || !fb {
		t.Fatalf("paused: fallback=%v err=%v; want a fallback decision", fb, err)
	}
	if err := admin.Do(bg, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	// The paused request may have run once the pause ended; either way the
	// server, not the fallback, now decides.
	start = time.Now()
	res, fb, err := r.Decide(bg, "k", 1)
	t.Logf("unpaused decision took %v", time.Since(start))
	if err != nil || fb || !res.Allowed || res.Remaining > 1 {
		t.Fatalf("unpaused: %+v fallback=%v err=%v; want Redis to decide", res, fb, err)
	}
}

// A caller that has gone away is no evidence that Redis is down.
func TestRedisFallbackCallerCancelled(t *testing.T) {
	c, cmds := countedClient(t)
	clk := shedtest.NewClock(contractStart)
	r := fixedRedis(t, c, clk, TokenBucket, PerSecond(5), RedisConfig{OnFallback: func(error) {}})
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, fb, err := r.Decide(ctx, "k", 1); err != nil || !fb {
		t.Fatalf("cancelled caller: fallback=%v err=%v", fb, err)
	}
	before := cmds.n.Load()
	if _, fb, err := r.Decide(bg, "k", 1); err != nil || fb {
		t.Fatalf("next caller: fallback=%v err=%v; want Redis", fb, err)
	}
	if cmds.n.Load() == before {
		t.Fatal("Redis was left alone after a cancelled caller")
	}
}
