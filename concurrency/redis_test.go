package concurrency

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// newClient returns a client of the test server with context timeouts on,
// as RedisConfig requires: each call is a separate host.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	redistest.Client(t) // skips, or fails under scripts/test.sh, when there is no server
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func mustNewRedis(t testing.TB, c redis.UniversalClient, cfg RedisConfig) *RedisLayer {
	t.Helper()
	if cfg.Timeout == 0 {
		// A loaded, race-instrumented machine can miss the 50ms default, and
		// a fallback decision would then pass for Redis' own. Tests of the
		// timeout set it.
		cfg.Timeout = 5 * time.Second
	}
	r, err := NewRedis(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func zcard(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRedisLimitsAcrossHosts(t *testing.T) {
	prefix := redistest.Prefix(t)
	ca, cb := newClient(t), newClient(t)
	cfg := RedisConfig{Config: Config{Limit: 3, PerKey: 2}, Prefix: prefix, ExpectedInstances: 2}
	a := mustNewRedis(t, ca, cfg)
	b := mustNewRedis(t, cb, cfg)
	ctx := context.Background()

	a1, err := a.Acquire(ctx, shed.Request{Key: "alice"})
	if err != nil || a1.Fallback {
		t.Fatalf("a1: %v fallback=%v", err, a1.Fallback)
	}
	a2, err := a.Acquire(ctx, shed.Request{Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(ctx, shed.Request{Key: "alice"})
	r := shedtest.Rejection(t, err)
	if r.Status != http.StatusTooManyRequests || r.Policies[0].Policy != PolicyPerKey || r.Fallback {
		t.Fatalf("alice's third request on another host: %+v", r)
	}
	b1, err := b.Acquire(ctx, shed.Request{Key: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if b1.Quota.Policy != PolicyOverall || b1.Quota.Remaining != 0 {
		t.Fatalf("quota %+v, want the overall one with nothing left", b1.Quota)
	}
	_, err = b.Acquire(ctx, shed.Request{Key: "carol"})
	if r := shedtest.Rejection(t, err); r.Status != http.StatusServiceUnavailable || r.Policies[0].Policy != PolicyOverall {
		t.Fatalf("over the fleet's limit: %+v", r)
	}
	if n := zcard(t, ca, a.overallKey()); n != 3 {
		t.Fatalf("overall set holds %d, want 3", n)
	}
	if n := zcard(t, ca, a.keyFor(shed.Request{Key: "alice"})); n != 2 {
		t.Fatalf("alice's set holds %d, want 2", n)
	}
	for _, k := range []string{a.overallKey(), a.keyFor(shed.Request{Key: "alice"})} {
		if ttl := ca.PTTL(ctx, k).Val(); ttl <= 0 || ttl > DefaultTTL {
			t.Fatalf("key %s has TTL %v", k, ttl)
		}
	}
	a1.Release(shed.Completed)
	if _, err := b.Acquire(ctx, shed.Request{Key: "carol"}); err != nil {
		t.Fatalf("after a release on the other host: %v", err)
	}
	if a.Held() != 1 || b.Held() != 2 {
		t.Fatalf("held: a %d b %d", a.Held(), b.Held())
	}
	a2.Release(shed.Completed)
	b1.Release(shed.Completed)
}

func TestRedisCostAndModes(t *testing.T) {
	prefix := redistest.Prefix(t)
	c := newClient(t)
	ctx := context.Background()
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 4, Enforcement: shed.Enforcement{DryRun: true}},
		Prefix: prefix + "dry", ExpectedInstances: 1})
	big, err := r.Acquire(ctx, shed.Request{Cost: 3})
	if err != nil || big.DryRun {
		t.Fatal(err, big.DryRun)
	}
	over, err := r.Acquire(ctx, shed.Request{Cost: 2})
	if err != nil || !over.DryRun {
		t.Fatalf("dry run: %v DryRun=%v", err, over.DryRun)
	}
	// The dry-run admission over the limit holds nothing, as a rejection
	// would not.
	if n := zcard(t, c, r.overallKey()); n != 3 {
		t.Fatalf("set holds %d members, want 3 (one per unit of the admission within the limit)", n)
	}
	big.Release(shed.Completed)
	over.Release(shed.Completed)
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d after releases", n)
	}

	hr := shed.HeadroomFunc(func() float64 { return 1 })
	e := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 10, Enforcement: shed.Enforcement{Mode: shed.Elastic, Headroom: hr, Overage: 0.2}},
		Prefix: prefix + "elastic", ExpectedInstances: 1})
	overs := 0
	for i := 0; i < 12; i++ {
		ls, err := e.Acquire(ctx, shed.Request{})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if ls.Over {
			overs++
		}
	}
	if overs != 2 {
		t.Fatalf("%d admitted over the limit, want 2", overs)
	}
	if _, err := e.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("admitted above the elastic ceiling")
	}
}

func TestRedisReleaseIsIdempotent(t *testing.T) {
	c := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 2}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	other := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 2}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	ctx := context.Background()
	a, _ := r.Acquire(ctx, shed.Request{})
	b, _ := r.Acquire(ctx, shed.Request{})
	copyOfA := a
	a.Release(shed.Completed)
	a.Release(shed.Completed)
	r.Release(&copyOfA, shed.Completed) // a copy handed straight to Release
	foreign, _ := other.Acquire(ctx, shed.Request{})
	r.Release(&foreign, shed.Completed)
	r.Release(&shed.Lease{}, shed.Completed)
	r.Release(&shed.Lease{Ref: 42}, shed.Completed)
	if n := zcard(t, c, r.overallKey()); n != 1 {
		t.Fatalf("set holds %d, want b's lease only", n)
	}
	if n := zcard(t, c, other.overallKey()); n != 1 {
		t.Fatal("a foreign lease was released by the wrong limiter")
	}
	b.Release(shed.Completed)
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d at the end", n)
	}
}

func TestRedisKeysStayInTheirHashTag(t *testing.T) {
	c := newClient(t)
	perKey := mustNewRedis(t, c, RedisConfig{Config: Config{PerKey: 1}, Prefix: "p", ExpectedInstances: 1})
	both := mustNewRedis(t, c, RedisConfig{Config: Config{PerKey: 1, Limit: 5}, Prefix: "p", ExpectedInstances: 1})
	for _, k := range []string{"plain", "a}b{c", "}{", "new\nline", "%7D", "{x}", strings.Repeat("z", 500)} {
		key := perKey.keyFor(shed.Request{Key: k})
		if strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || !strings.HasPrefix(key, "{p:leases:key:") || !strings.HasSuffix(key, "}") {
			t.Errorf("per-key key for %q escapes its tag: %q", k, key)
		}
		if strings.ContainsAny(key, "\n\r") || len(key) != len("{p:leases:key:}")+43 {
			t.Errorf("key for %q: %q", k, key)
		}
		key = both.keyFor(shed.Request{Key: k})
		if !strings.HasPrefix(key, "{p:leases}:key:") || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 {
			t.Errorf("key for %q must share the overall tag {p:leases}: %q", k, key)
		}
	}
	if perKey.keyFor(shed.Request{Key: "a}b"}) == perKey.keyFor(shed.Request{Key: "a%7Db"}) {
		t.Error("two keys share a set")
	}
	if both.overallKey() != "{p:leases}" || perKey.overallKey() != "" {
		t.Errorf("overall keys %q %q", both.overallKey(), perKey.overallKey())
	}
}

// TestRedisCrashedHostsLeaseExpires kills a host mid-lease (its client is
// closed, nothing is released) and shows its lease expiring after the TTL,
// after which another host gets the slot. Redis keeps the time, so this
// test waits real time: about one TTL.
func TestRedisCrashedHostsLeaseExpires(t *testing.T) {
	prefix := redistest.Prefix(t)
	const ttl = 500 * time.Millisecond
	cfg := RedisConfig{Config: Config{Limit: 1}, Prefix: prefix, TTL: ttl, RenewEvery: 100 * time.Millisecond, ExpectedInstances: 1}
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	dying := redis.NewClient(opt)
	a := mustNewRedis(t, dying, cfg)
	live := newClient(t)
	b := mustNewRedis(t, live, cfg)
	ctx := context.Background()
	if _, err := a.Acquire(ctx, shed.Request{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dying.Close() // the host dies: no release, no more renewals
	if _, err := b.Acquire(ctx, shed.Request{}); err == nil {
		t.Fatal("the dead host's lease did not count")
	}
	deadline := start.Add(4 * ttl)
	for {
		ls, err := b.Acquire(ctx, shed.Request{})
		if err == nil {
			if ls.Fallback {
				t.Fatal("admitted from the fallback, not from Redis")
			}
			ls.Release(shed.Completed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead host's lease has not expired %v after a TTL of %v", time.Since(start), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The lease was renewed until the host died, so it lives about one TTL
	// past the death.
	if waited := time.Since(start); waited < ttl-150*time.Millisecond {
		t.Fatalf("the lease expired after %v, before its TTL of %v", waited, ttl)
	}
	if n := zcard(t, live, b.overallKey()); n != 0 {
		t.Fatalf("set holds %d", n)
	}
}

func redisTimeMs(t testing.TB, c redis.UniversalClient) int64 {
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

func TestRedisRenewalExtendsLeasesAndNeverResurrects(t *testing.T) {
	clock := shedtest.NewClock(t0)
	c := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 5, PerKey: 5, Clock: clock}, Prefix: redistest.Prefix(t),
		TTL: 3 * time.Second, RenewEvery: time.Second, ExpectedInstances: 1})
	ctx := context.Background()
	ls, err := r.Acquire(ctx, shed.Request{Key: "k", Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := r.Acquire(ctx, shed.Request{Key: "k"})
	gone.Release(shed.Completed)
	member := ls.Ref.(*redisLease).member
	score := func(key, m string) float64 {
		s, err := c.ZScore(ctx, key, m).Result()
		if err != nil {
			t.Fatalf("ZSCORE %s %s: %v", key, m, err)
		}
		return s
	}
	before := score(r.overallKey(), member)
	// Let Redis's clock move on a few milliseconds (bounded wait).
	t1 := redisTimeMs(t, c)
	for redisTimeMs(t, c) < t1+5 {
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Second) // the renewer's tick runs, and returns, inside Advance
	for _, k := range []string{r.overallKey(), r.keyFor(shed.Request{Key: "k"})} {
		for _, m := range []string{member, member + "#2"} {
			if after := score(k, m); after <= before {
				t.Fatalf("%s %s not renewed: %v then %v", k, m, before, after)
			}
		}
	}
	if n := zcard(t, c, r.overallKey()); n != 2 {
		t.Fatalf("renewal brought back a released lease: %d members", n)
	}
	if r.Lost() != 0 {
		t.Fatalf("lost %d", r.Lost())
	}
	ls.Release(shed.Completed)
	clock.Advance(time.Second)
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d", n)
	}
}

func TestRedisCancelledAcquireLeavesNothing(t *testing.T) {
	c := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 1000, PerKey: 1000}, Prefix: redistest.Prefix(t),
		Timeout: time.Second, ExpectedInstances: 1})
	cancelled, admitted := 0, 0
	for i := 0; i < 300; i++ {
		// Deadlines from 0 to ~4.5ms end some calls before, some during and
		// some after the script runs.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*15*time.Microsecond)
		ls, err := r.Acquire(ctx, shed.Request{Key: "k"})
		cancel()
		switch {
		case err == nil:
			admitted++
			ls.Release(shed.Dropped)
		case errors.Is(err, context.DeadlineExceeded):
			cancelled++
		default:
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	t.Logf("cancelled %d, admitted %d", cancelled, admitted)
	if cancelled == 0 {
		t.Fatal("no acquire was cancelled: the test proves nothing")
	}
	if r.Fallback() || r.Fallbacks() != 0 {
		t.Fatal("a caller's cancellation must not count as Redis failing")
	}
	if err := r.renewNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("%d leases left behind by cancelled acquires", n)
	}
	if n := zcard(t, c, r.keyFor(shed.Request{Key: "k"})); n != 0 {
		t.Fatalf("%d per-key leases left behind", n)
	}
}

func TestRedisBadConfig(t *testing.T) {
	c := newClient(t)
	plain := redis.NewClient(redistest.Options(t)) // ContextTimeoutEnabled off
	defer plain.Close()
	base := func() RedisConfig {
		return RedisConfig{Config: Config{Limit: 1}, ExpectedInstances: 1}
	}
	var typedNil *redis.Client
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   string
	}{{"nil client", nil, "client is nil"}, {"typed nil client", typedNil, "client is nil"}, {"no context timeouts", plain, "ContextTimeoutEnabled"}} {
		r, err := NewRedis(tc.client, base())
		if err == nil || r != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewRedis = %v, %v; want an error saying %q", tc.name, r, err, tc.want)
		}
	}
	cases := []struct {
		name  string
		edit  func(*RedisConfig)
		field string
	}{
		{"zero limit", func(c *RedisConfig) { c.Limit = 0 }, "Config.Limit"},
		{"negative limit", func(c *RedisConfig) { c.Limit = -5 }, "Config.Limit"},
		{"ttl below renewal", func(c *RedisConfig) { c.TTL, c.RenewEvery = time.Second, 2*time.Second }, "RedisConfig.TTL"},
		{"ttl equals renewal", func(c *RedisConfig) { c.TTL, c.RenewEvery = time.Second, time.Second }, "RedisConfig.TTL"},
		{"negative ttl", func(c *RedisConfig) { c.TTL = -1 }, "RedisConfig.TTL"},
		{"negative instances", func(c *RedisConfig) { c.ExpectedInstances = -1 }, "RedisConfig.ExpectedInstances"},
		{"braces in prefix", func(c *RedisConfig) { c.Prefix = "a{b}" }, "RedisConfig.Prefix"},
		{"negative timeout", func(c *RedisConfig) { c.Timeout = -1 }, "RedisConfig.Timeout"},
		{"adaptive", func(c *RedisConfig) { c.Adaptive = &Adaptive{Floor: 1, Ceiling: 2} }, "RedisConfig.Adaptive"},
		{"queue", func(c *RedisConfig) {
			c.Enforcement = shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 1, MaxWait: time.Second}}
		}, "RedisConfig.Enforcement.Action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			r, err := NewRedis(c, cfg)
			if err == nil || r != nil {
				t.Fatal("NewRedis accepted it")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// proxy stands between a client and the test server, and can stop
// answering (a slow or partitioned Redis) and start again.
type proxy struct {
	ln       net.Listener
	target   string
	down     atomic.Bool
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if p.down.Load() {
			continue // hold it open, never answer
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

// cut closes every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// stop makes Redis unreachable: open connections are cut, new ones hang.
func (p *proxy) stop() { p.down.Store(true); p.cut() }

func (p *proxy) start() { p.cut(); p.down.Store(false) }

func TestRedisFallsBackToTheLocalShareAndReturns(t *testing.T) {
	direct := newClient(t)
	px := newProxy(t, redistest.Addr(t))
	opt := redistest.Options(t)
	opt.Addr = px.ln.Addr().String()
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	clock := shedtest.NewClock(t0)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 8, Clock: clock}, Prefix: redistest.Prefix(t), ExpectedInstances: 2,
		Timeout: 30 * time.Millisecond, ProbeInterval: 100 * time.Millisecond, TTL: time.Minute})
	ctx := context.Background()
	// A connection open first: dialling through the proxy on a loaded
	// machine can take the whole 30ms timeout.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	onRedis, err := r.Acquire(ctx, shed.Request{})
	if err != nil || onRedis.Fallback {
		t.Fatalf("Redis up: %v fallback=%v", err, onRedis.Fallback)
	}
	releasedWhileDown, _ := r.Acquire(ctx, shed.Request{})
	px.stop()
	var local []shed.Lease
	for i := 0; i < 2; i++ {
		ls, err := r.Acquire(ctx, shed.Request{})
		if err != nil || !ls.Fallback {
			t.Fatalf("Redis down, acquire %d: %v fallback=%v", i, err, ls.Fallback)
		}
		local = append(local, ls)
	}
	if !r.Fallback() || r.Fallbacks() != 1 {
		t.Fatalf("Fallback() %v, Fallbacks() %d", r.Fallback(), r.Fallbacks())
	}
	// The local share is 8 ÷ 2 = 4, of which this instance still holds 2
	// in Redis (the fallback starts from what it holds), and
	// until ProbeInterval passes no request tries Redis.
	tried := px.accepted.Load()
	_, err = r.Acquire(ctx, shed.Request{})
	if rej := shedtest.Rejection(t, err); !rej.Fallback || rej.Status != http.StatusServiceUnavailable {
		t.Fatalf("over the local share: %+v", rej)
	}
	if px.accepted.Load() != tried {
		t.Fatal("a request tried Redis before ProbeInterval passed")
	}
	clock.Advance(100 * time.Millisecond)
	start := time.Now()
	if _, err := r.Acquire(ctx, shed.Request{}); err == nil || !r.Fallback() {
		t.Fatal("a probe while Redis is still down must fall back")
	}
	// The probe meets a Redis that accepts but never answers: Timeout
	// (30ms) bounds it, not go-redis's own dial and read timeouts (seconds).
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a probe of a silent Redis took %v", d)
	}
	if px.accepted.Load() == tried {
		t.Fatal("no probe after ProbeInterval")
	}
	// A lease from the fallback is released locally; one from Redis is
	// queued for removal without waiting on Redis.
	local[0].Release(shed.Completed)
	tried = px.accepted.Load()
	releasedWhileDown.Release(shed.Completed)
	if px.accepted.Load() != tried {
		t.Fatal("a release waited on Redis while falling back")
	}
	if n := r.localLimiter().InFlight(); n != 1 {
		t.Fatalf("local in flight %d, want 1", n)
	}

	px.start()
	clock.Advance(100 * time.Millisecond)
	back, err := r.Acquire(ctx, shed.Request{})
	if err != nil || back.Fallback || r.Fallback() {
		t.Fatalf("Redis back: %v fallback=%v", err, back.Fallback)
	}
	local[1].Release(shed.Completed)
	back.Release(shed.Completed)
	onRedis.Release(shed.Completed)
	if err := r.renewNow(ctx); err != nil { // removes what the timed-out calls may have added
		t.Fatal(err)
	}
	if n := r.localLimiter().InFlight(); n != 0 {
		t.Fatalf("local in flight %d", n)
	}
	if n := zcard(t, direct, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d", n)
	}
}

func TestRedisSoftModeAndRoutes(t *testing.T) {
	clock := shedtest.NewClock(t0)
	c := newClient(t)
	ctx := context.Background()
	r := mustNewRedis(t, c, RedisConfig{Config: Config{PerKey: 2, KeyBy: KeyByRoute, Clock: clock,
		Enforcement: shed.Enforcement{Mode: shed.Soft, Overage: 0.5, OverageFor: time.Minute}},
		Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	route := shed.Request{Key: "anyone", Route: "POST /v1/charges"}
	var held []shed.Lease
	for i := 0; i < 3; i++ {
		ls, err := r.Acquire(ctx, route)
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if ls.Over != (i == 2) {
			t.Fatalf("acquire %d: Over = %v", i, ls.Over)
		}
		held = append(held, ls)
	}
	_, err := r.Acquire(ctx, route)
	if rej := shedtest.Rejection(t, err); rej.Status != http.StatusServiceUnavailable || rej.Policies[0].Policy != PolicyPerRoute {
		t.Fatalf("over the route's ceiling: %+v", rej)
	}
	if _, err := r.Acquire(ctx, shed.Request{Route: "GET /v1/charges"}); err != nil {
		t.Fatalf("another route: %v", err)
	}
	// The overage lasts OverageFor; then the hard limit holds until the
	// route is back under it.
	held[2].Release(shed.Completed)
	clock.Advance(2 * time.Minute)
	if _, err := r.Acquire(ctx, route); err == nil {
		t.Fatal("the overage outlived OverageFor")
	}
	held[1].Release(shed.Completed)
	if ls, err := r.Acquire(ctx, route); err != nil || ls.Over {
		t.Fatalf("back under the limit: %v over=%v", err, ls.Over)
	}
	// Dipping under the limit earns no new episode within the cool-down
	// (OverageCooldown, default OverageFor) of the last overage.
	if _, err := r.Acquire(ctx, route); err == nil {
		t.Fatal("a new overage episode within the cool-down")
	}
	clock.Advance(time.Minute)
	if ls, err := r.Acquire(ctx, route); err != nil || !ls.Over {
		t.Fatalf("a new overage episode after the cool-down: %v over=%v", err, ls.Over)
	}
}

func TestRedisLargeCosts(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 3000}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	big, err := r.Acquire(ctx, shed.Request{Cost: 2500})
	if err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, r.overallKey()); n != 2500 {
		t.Fatalf("set holds %d members, want 2500", n)
	}
	if _, err := r.Acquire(ctx, shed.Request{Cost: 501}); err == nil {
		t.Fatal("2500 + 501 > 3000 admitted")
	}
	// More than the limit can ever hold: rejected without touching Redis.
	_, err = r.Acquire(ctx, shed.Request{Cost: 1 << 40})
	if rej := shedtest.Rejection(t, err); rej.Status != http.StatusServiceUnavailable {
		t.Fatalf("%+v", rej)
	}
	big.Release(shed.Completed)
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d", n)
	}

	dry := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 10, Enforcement: shed.Enforcement{DryRun: true}}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	ls, err := dry.Acquire(ctx, shed.Request{Cost: 1 << 40})
	if err != nil || !ls.DryRun {
		t.Fatalf("dry run: %v DryRun=%v", err, ls.DryRun)
	}
	ls.Release(shed.Completed)
	if n := zcard(t, c, dry.overallKey()); n != 0 {
		t.Fatalf("set holds %d", n)
	}
}

// renewGate holds the renewer's pipelines until released.
type renewGate struct {
	held, release chan struct{}
	once          sync.Once
}

func (g *renewGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *renewGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *renewGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && a[1] == renewScript.Hash() {
				g.once.Do(func() { close(g.held) })
				<-g.release
				break
			}
		}
		return next(ctx, cmds)
	}
}

// Close waits for a renewal under way: returned first, the renewer went on
// using the client its owner may close next.
func TestRedisCloseWaitsForTheRenewer(t *testing.T) {
	clock := shedtest.NewClock(t0)
	c := newClient(t)
	g := &renewGate{held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(g)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 5, Clock: clock}, Prefix: redistest.Prefix(t),
		TTL: 3 * time.Second, RenewEvery: time.Second, ExpectedInstances: 1})
	if _, err := r.Acquire(context.Background(), shed.Request{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	ticked := make(chan struct{})
	go func() { clock.Advance(time.Second); close(ticked) }()
	<-g.held
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	// A Close that does not wait returns at once; give it the time to
	// show that, then let the renewal go.
	select {
	case <-closed:
		close(g.release)
		t.Fatal("Close returned while a renewal was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	<-closed
	<-ticked
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("%d leases left after Close", n)
	}
}

// TestRedisLostLease: a lease whose renewals stopped for longer than the
// TTL is gone; the next renewal finds it gone, stops renewing it and counts
// it, and its release is harmless.
func TestRedisLostLease(t *testing.T) {
	clock := shedtest.NewClock(t0) // the renewer only ticks when told
	c := newClient(t)
	ctx := context.Background()
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 2, Clock: clock}, Prefix: redistest.Prefix(t),
		ExpectedInstances: 1, TTL: 300 * time.Millisecond, RenewEvery: 100 * time.Millisecond,
		Timeout: 5 * time.Second}) // long enough that a loaded machine reads the lease before it expires
	ls, err := r.Acquire(ctx, shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	score, err := c.ZScore(ctx, r.overallKey(), ls.Ref.(*redisLease).member).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for float64(redisTimeMs(t, c)) <= score {
		if time.Now().After(deadline) {
			t.Fatal("Redis time did not pass the lease's expiry")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.renewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Lost() != 1 || r.Held() != 0 {
		t.Fatalf("lost %d, held %d; want 1, 0", r.Lost(), r.Held())
	}
	ls.Release(shed.Completed)
	if _, err := r.Acquire(ctx, shed.Request{}); err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, r.overallKey()); n != 1 {
		t.Fatalf("set holds %d, want 1", n)
	}
}

func TestRedisAsyncRelease(t *testing.T) {
	clock := shedtest.NewClock(t0)
	c := newClient(t)
	ctx := context.Background()
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 100, Clock: clock}, Prefix: redistest.Prefix(t),
		ExpectedInstances: 1, AsyncRelease: true, Timeout: 5 * time.Second}) // no fallback on a loaded machine
	var held []shed.Lease
	for i := 0; i < 50; i++ {
		ls, err := r.Acquire(ctx, shed.Request{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	for i := range held {
		held[i].Release(shed.Completed)
	}
	if n := zcard(t, c, r.overallKey()); n != 50 {
		t.Fatalf("removed before the batch went: %d left", n)
	}
	clock.Advance(flushSoon) // the batch goes, in one pipeline, inside Advance
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("%d left after the batch", n)
	}
	if r.Held() != 0 {
		t.Fatalf("held %d", r.Held())
	}
}

// ExpectedInstances left at zero counts the live instances: two instances
// under one prefix each fall back to half the limits, rounded down.
// ExpectedInstances set overrides the count.
func TestRedisOutageShareFromLiveInstances(t *testing.T) {
	prefix := redistest.Prefix(t)
	cfg := RedisConfig{Config: Config{Limit: 10, PerKey: 5, KeyBy: KeyByClient}, Prefix: prefix}
	a := mustNewRedis(t, newClient(t), cfg)
	b := mustNewRedis(t, newClient(t), cfg)
	deadline := time.Now().Add(5 * time.Second)
	for a.Instances() != 2 || b.Instances() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("instances counted %d and %d, want 2", a.Instances(), b.Instances())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := a.localLimiter().Limit(); got != 5 {
		t.Fatalf("local share %d of 10 over 2 instances, want 5", got)
	}
	r3 := mustNewRedis(t, newClient(t), RedisConfig{Config: Config{Limit: 10}, Prefix: prefix, ExpectedInstances: 3})
	if got := r3.localLimiter().Limit(); got != 3 {
		t.Fatalf("local share %d of 10 over 3 instances, want 3 (rounded down)", got)
	}
	if r3.Instances() != 3 {
		t.Fatalf("ExpectedInstances 3 does not override the count: %d", r3.Instances())
	}
}

// TestRedisSoftModeHoldsEveryLimitToItsEpisode: on Redis too, a request over
// both the per-key and the overall limit gets the overage only if both
// episodes allow it, whichever limit the acquire script finds first.
func TestRedisSoftModeHoldsEveryLimitToItsEpisode(t *testing.T) {
	clock := shedtest.NewClock(t0)
	r := mustNewRedis(t, newClient(t), RedisConfig{Config: Config{Limit: 10, PerKey: 5, KeyBy: KeyByClient, Clock: clock,
		Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second}},
		Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	ctx := context.Background()
	var held []shed.Lease
	defer func() {
		for i := range held {
			held[i].Release(shed.Completed)
		}
	}()
	for i := 0; i < 10; i++ {
		ls, err := r.Acquire(ctx, shed.Request{Key: []string{"a", "b"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	// The overall limit's episode begins; it ends 30s later.
	extra, err := r.Acquire(ctx, shed.Request{Key: "c"})
	if err != nil || !extra.Over {
		t.Fatalf("overall overage: %v over=%v", err, extra.Over)
	}
	extra.Release(shed.Completed)
	clock.Advance(31 * time.Second)
	if _, err := r.Acquire(ctx, shed.Request{Key: "d"}); err == nil {
		t.Fatal("a fresh key admitted over the overall limit 31s into its episode")
	}
	// Key a is at its own limit (5) and the layer at its overall one: the
	// script finds the per-key limit first, whose episode is fresh; the
	// overall one is spent.
	if ls, err := r.Acquire(ctx, shed.Request{Key: "a"}); err == nil {
		held = append(held, ls)
		t.Fatalf("admitted over the overall limit past its episode (over=%v), in flight %d", ls.Over, r.InFlight())
	}
	if n := r.InFlight(); n != 10 {
		t.Fatalf("in flight %d, want 10", n)
	}
}
