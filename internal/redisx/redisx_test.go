package redisx

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// The share never lets n instances admit more than the limit together.
func TestShareNeverExceedsTheLimit(t *testing.T) {
	for limit := int64(0); limit <= 50; limit++ {
		for n := 1; n <= 12; n++ {
			s := Share(limit, n)
			if s*int64(n) > limit {
				t.Fatalf("Share(%d, %d) = %d: %d instances admit %d", limit, n, s, n, s*int64(n))
			}
			if (s+1)*int64(n) <= limit {
				t.Fatalf("Share(%d, %d) = %d is not the largest safe share", limit, n, s)
			}
		}
	}
	if Share(7, 0) != 7 || Share(7, -3) != 7 || Share(-1, 2) != 0 {
		t.Fatal("n < 1 must count as 1, a negative limit as 0")
	}
	if Instances(3, 5) != 3 || Instances(0, 5) != 5 || Instances(0, 0) != 1 {
		t.Fatal("Instances: expected overrides the count, which overrides 1")
	}
}

func TestOptionsValidateNamesFields(t *testing.T) {
	err := Options{Prefix: "a{b", Timeout: -1, ProbeInterval: -1, ExpectedInstances: -1}.Validate("layer")
	for _, f := range []string{"layer: RedisConfig.Prefix", "RedisConfig.Timeout", "RedisConfig.ProbeInterval", "RedisConfig.ExpectedInstances"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not name %s", err, f)
		}
	}
	o := Options{}.WithDefaults("p:")
	if o.Prefix != "p:" || o.Timeout != DefaultTimeout || o.ProbeInterval != DefaultProbeInterval || o.ExpectedInstances != 0 {
		t.Fatalf("defaults %+v", o)
	}
}

// No user key, whatever its bytes, leaves its tag or the prefix; every key
// starts with '{', the prefix and a ':' (once, a prefix "x" made
// "{xall}", and per-key sets did not start with '{').
func FuzzKeys(f *testing.F) {
	for _, k := range []string{"", "k", "{", "}", "{k}", "a\nb", "\x00{}", strings.Repeat("}", 100)} {
		f.Add(k)
	}
	ks := NewKeys("p:")
	f.Fuzz(func(t *testing.T, key string) {
		for _, rk := range []string{ks.Key("x", key), ks.In("all", "k", key)} {
			if strings.Count(rk, "{") != 1 || strings.Count(rk, "}") != 1 || strings.ContainsAny(rk, " \r\n\x00") {
				t.Fatalf("key %q: redis key %q", key, rk)
			}
		}
		if !strings.HasPrefix(ks.Key("x", key), "{p:x:") || !strings.HasPrefix(ks.In("all", "k", key), ks.Fixed("all")+":k:") ||
			ks.Fixed("all") != "{p:all}" {
			t.Fatalf("key %q leaves its layout", key)
		}
		if ks.Key("x", key) == ks.Key("x", key+"\x00") {
			t.Fatalf("keys %q and %q share a Redis key", key, key+"\x00")
		}
	})
}

// Layers on one client and clock share a gate: one outage seen by one is
// seen by all, and the gate probes at the shortest interval asked.
func TestSharedGate(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	clk := shedtest.NewClock(time.Unix(0, 0))
	a, relA := SharedGate(c, clk, time.Second)
	b, relB := SharedGate(c, clk, 100*time.Millisecond)
	if a != b || a.Interval() != 100*time.Millisecond {
		t.Fatalf("gates %p %p, interval %v", a, b, a.Interval())
	}
	other, relO := SharedGate(c, shed.SystemClock, time.Second)
	if other == a {
		t.Fatal("a gate on another clock is shared")
	}
	relO()
	a.Failed(1)
	if b.Try(2) {
		t.Fatal("the second layer waits again for an outage the first saw")
	}
	relA()
	relA() // once only
	if g, rel := SharedGate(c, clk, time.Second); g != a {
		t.Fatal("a gate still in use was dropped")
	} else {
		rel()
	}
	relB()
	if g, rel := SharedGate(c, clk, time.Second); g == a {
		t.Fatal("the last release did not drop the gate")
	} else {
		rel()
	}
}

func testClient(t *testing.T) *redis.Client {
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	redistest.Client(t)
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// Two processes (two clients) in one set count 2; one leaving counts 1.
func TestPresenceCountsLiveInstances(t *testing.T) {
	key := NewKeys(redistest.Prefix(t)).Fixed(PresenceName)
	a, leaveA := JoinPresence(testClient(t), key, 50*time.Millisecond)
	b, leaveB := JoinPresence(testClient(t), key, 50*time.Millisecond)
	defer leaveB()
	if a == b {
		t.Fatal("two clients share one presence")
	}
	waitFor(t, func() bool { return a.Count() == 2 && b.Count() == 2 }, "both count 2")
	leaveA()
	ctx := context.Background()
	if n, err := b.Refresh(ctx); err != nil || n != 1 {
		t.Fatalf("after one left: %d, %v", n, err)
	}
}

// presenceGate holds this instance's refreshes of one set until released,
// and notes a removal sent while one was held.
type presenceGate struct {
	key                       string
	held, release             chan struct{}
	holding, removedMidFlight atomic.Bool
}

func (g *presenceGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *presenceGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *presenceGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 7 && a[3] == g.key {
			switch a[6] {
			case "1":
				if g.holding.CompareAndSwap(false, true) {
					close(g.held)
					<-g.release
					err := next(ctx, cmd)
					g.holding.Store(false)
					return err
				}
			case "0":
				if g.holding.Load() {
					g.removedMidFlight.Store(true)
				}
			}
		}
		return next(ctx, cmd)
	}
}

// The last leave waits for a refresh under way before it removes the
// member: removed first, the member came back with the refresh, and the
// refresh used the client after Close had returned (go-redis logged
// "Unexpected conn state changed by hook to CLOSED" when the owner closed
// the client right after).
func TestPresenceLeaveWaitsForARefresh(t *testing.T) {
	c := testClient(t)
	key := NewKeys(redistest.Prefix(t)).Fixed(PresenceName)
	g := &presenceGate{key: key, held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(g)
	p, leave := JoinPresence(c, key, 20*time.Millisecond)
	<-g.held // the first refresh, held
	left := make(chan struct{})
	go func() { leave(); close(left) }()
	// A leave that does not wait removes the member at once; give it the
	// time to show that, then let the refresh go.
	select {
	case <-left:
		t.Fatal("leave returned while a refresh was under way")
	case <-time.After(100 * time.Millisecond):
	}
	if g.removedMidFlight.Load() {
		t.Fatal("leave removed the member while a refresh was under way")
	}
	close(g.release)
	<-left
	if n := c.ZCard(context.Background(), key).Val(); n != 0 {
		t.Fatalf("%d members after the last leave, want 0 (%s)", n, p.ID())
	}
}

// One client joining twice counts once.
func TestPresenceSharedPerClient(t *testing.T) {
	c := testClient(t)
	key := NewKeys(redistest.Prefix(t)).Fixed(PresenceName)
	a, leaveA := JoinPresence(c, key, 0)
	b, leaveB := JoinPresence(c, key, 0)
	defer leaveB()
	if a != b {
		t.Fatal("one process joined twice")
	}
	leaveA()
	if n, err := b.Refresh(context.Background()); err != nil || n != 1 {
		t.Fatalf("count %d, %v; want 1", n, err)
	}
}

// RunAll loads a script the server lacks (flushed by a restart) and runs
// the pipeline again.
func TestRunAllLoadsMissingScript(t *testing.T) {
	c := testClient(t)
	s := NewScript("return redis.call('INCR', KEYS[1]) -- " + redistest.Prefix(t))
	key := NewKeys(redistest.Prefix(t)).Fixed("n")
	cmds := s.RunAll(context.Background(), c, []Call{{Keys: []string{key}}, {Keys: []string{key}}})
	for i, cmd := range cmds {
		if v, err := cmd.Int64(); err != nil || v != int64(i+1) {
			t.Fatalf("call %d: %v, %v", i, v, err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
