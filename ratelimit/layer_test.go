package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func mem(t testing.TB, clk shed.Clock, alg Algorithm, l Limit) *Memory {
	t.Helper()
	m, err := NewMemory(alg, l, MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newTestLayer(t testing.TB, cfg Config) *Layer {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

type ipKey struct{}

var byIP = By("ip", func(ctx context.Context, _ shed.Request) string {
	ip, _ := ctx.Value(ipKey{}).(string)
	return ip
})

func TestLayerRejectsWith429AndPolicies(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerMinute(2))},
	}})
	ctx := context.Background()
	req := shed.Request{Key: "alice", Cost: 1}
	for i := 0; i < 2; i++ {
		lease, err := l.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want := shed.Quota{Policy: "per-key", Limit: 2, Window: time.Minute, Remaining: int64(1 - i), Reset: time.Minute}
		if lease.Quota != want {
			t.Fatalf("lease %d quota %+v, want %+v", i, lease.Quota, want)
		}
		lease.Release(shed.Completed)
	}
	clk.Advance(15 * time.Second)
	_, err := l.Acquire(ctx, req)
	rj := shedtest.Rejection(t, err)
	want := shed.Quota{Policy: "per-key", Limit: 2, Window: time.Minute, Remaining: 0, Reset: 45 * time.Second}
	if rj.Status != http.StatusTooManyRequests || rj.RetryAfter != 45*time.Second || len(rj.Policies) != 1 || rj.Policies[0] != want {
		t.Fatalf("rejection %+v", rj)
	}
	// another key is not affected
	if _, err := l.Acquire(ctx, shed.Request{Key: "bob"}); err != nil {
		t.Fatal(err)
	}
}

func TestLayerRejectedByOneRuleIsNotChargedByOthers(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	perIP := mem(t, clk, TokenBucket, PerMinute(10))
	perUser := mem(t, clk, TokenBucket, PerMinute(1))
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		{Name: "per-ip", Descriptors: []Descriptor{byIP}, Store: perIP},
		{Name: "per-user", Descriptors: []Descriptor{ByClient}, Store: perUser},
	}})
	ctx := context.WithValue(context.Background(), ipKey{}, "10.0.0.1")
	lease, err := l.Acquire(ctx, shed.Request{Key: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Quota.Policy != "per-user" || lease.Quota.Remaining != 0 {
		t.Fatalf("lease quota %+v, want the tightest rule (per-user, 0 left)", lease.Quota)
	}
	lease.Release(shed.Completed)
	for i := 0; i < 5; i++ {
		_, err := l.Acquire(ctx, shed.Request{Key: "u1"})
		if rj := shedtest.Rejection(t, err); rj.Policies[0].Policy != "per-user" {
			t.Fatalf("rejected by %+v, want per-user", rj.Policies)
		}
	}
	// per-ip paid for one request only: 9 units are left of 10
	if r, _ := perIP.Allow(context.Background(), "10.0.0.1", 9); !r.Allowed {
		t.Fatalf("per-ip charged for rejected requests: %+v", r)
	}
	// a request with no value for a descriptor is not counted by that rule
	if _, err := l.Acquire(context.Background(), shed.Request{Key: "u2"}); err != nil {
		t.Fatalf("request without an IP: %v", err)
	}
}

func TestLayerReleaseUnusedRefunds(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	lim := mem(t, clk, SlidingLog, PerMinute(1))
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: lim}}})
	ctx := context.Background()
	req := shed.Request{Key: "a"}
	lease, err := l.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	copied := lease
	lease.Release(shed.Unused)
	copied.Release(shed.Unused) // a copy's release must not refund twice
	lease, err = l.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("after an Unused release: %v", err)
	}
	lease.Release(shed.Completed)
	if _, err := l.Acquire(ctx, req); err == nil {
		t.Fatal("a Completed release refunded its unit, or a copy refunded twice")
	}
	lease.Release(shed.Unused) // released already: no effect
	if _, err := l.Acquire(ctx, req); err == nil {
		t.Fatal("second release of one lease refunded")
	}
}

func TestLayerDescriptorsAndDomains(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	shared := mem(t, clk, FixedWindow, PerMinute(1))
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		// both rules share one limiter: their keys must not meet
		{Name: "charges", Domain: "api", Descriptors: []Descriptor{RouteIs("POST /charges"), ByClient}, Store: shared},
		{Name: "routes", Domain: "api", Descriptors: []Descriptor{ByRoute}, Store: shared},
	}})
	ctx := context.Background()
	ok := func(req shed.Request) {
		t.Helper()
		lease, err := l.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		lease.Release(shed.Completed)
	}
	ok(shed.Request{Key: "a", Route: "POST /charges"})
	// per-route limit: any key on this route is now over
	if _, err := l.Acquire(ctx, shed.Request{Key: "b", Route: "POST /charges"}); err == nil {
		t.Fatal("per-route limit not applied")
	}
	// other routes are counted apart, and not by the charges rule
	ok(shed.Request{Key: "a", Route: "GET /charges"})
	ok(shed.Request{Key: "a", Route: "GET /x"})
	_, err := l.Acquire(ctx, shed.Request{Key: "a", Route: "GET /x"})
	if rj := shedtest.Rejection(t, err); rj.Policies[0].Policy != "routes" {
		t.Fatalf("rejected by %v", rj.Policies)
	}
}

func TestLayerDryRunNeverRejects(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Enforcement: shed.Enforcement{DryRun: true}, Rules: []Rule{
		{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, PerSecond(2))},
	}})
	dry := 0
	for i := 0; i < 10; i++ {
		lease, err := l.Acquire(context.Background(), shed.Request{Key: "a", Cost: int64(1 + i%4)})
		if err != nil {
			t.Fatalf("dry run rejected: %v", err)
		}
		if lease.DryRun {
			dry++
		}
	}
	// costs 1,2,3,4,1,2,3,4,1,2 against a burst of 2: the two requests of
	// cost 1 fit, the others would have been rejected
	if dry != 8 {
		t.Fatalf("%d leases marked DryRun, want 8", dry)
	}
}

func TestLayerCostAboveBurst(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, PerSecond(2))},
	}})
	_, err := l.Acquire(context.Background(), shed.Request{Key: "a", Cost: 3})
	if rj := shedtest.Rejection(t, err); rj.Status != 429 || rj.Reason != "request cost exceeds the rate limit" || rj.RetryAfter != 0 {
		t.Fatalf("rejection %+v", rj)
	}
}

func TestLayerSoftAllowsBoundedOverage(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Mode: shed.Soft, Overage: 0.2, OverageFor: 10 * time.Second},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerMinute(10))}}})
	ctx := context.Background()
	over := 0
	for i := 0; i < 12; i++ {
		lease, err := l.Acquire(ctx, shed.Request{Key: "a"})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if lease.Over {
			over++
		}
	}
	if over != 2 {
		t.Fatalf("%d requests over the limit, want 2 (20%% of 10)", over)
	}
	if _, err := l.Acquire(ctx, shed.Request{Key: "a"}); err == nil {
		t.Fatal("admitted beyond the ceiling")
	}
	// next window: the overage lasts at most OverageFor since it began
	clk.Advance(time.Minute)
	for i := 0; i < 10; i++ {
		l.Acquire(ctx, shed.Request{Key: "b"})
	}
	lease, err := l.Acquire(ctx, shed.Request{Key: "b"})
	if err != nil || !lease.Over {
		t.Fatalf("key b's first overage: %+v %v", lease, err)
	}
	clk.Advance(11 * time.Second)
	if _, err := l.Acquire(ctx, shed.Request{Key: "b"}); err == nil {
		t.Fatal("overage went on past OverageFor")
	}
	// key a's episode is its own: it starts now
	for i := 0; i < 10; i++ {
		l.Acquire(ctx, shed.Request{Key: "a"})
	}
	if lease, err := l.Acquire(ctx, shed.Request{Key: "a"}); err != nil || !lease.Over {
		t.Fatalf("key a held to key b's episode: %+v %v", lease, err)
	}
}

func TestLayerElasticFollowsHeadroom(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	var headroom atomic.Value
	headroom.Store(0.9)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Mode: shed.Elastic, Overage: 0.5, Headroom: shed.HeadroomFunc(func() float64 { return headroom.Load().(float64) })},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, SlidingWindow, PerMinute(4))}}})
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		l.Acquire(ctx, shed.Request{Key: "a"})
	}
	lease, err := l.Acquire(ctx, shed.Request{Key: "a"})
	if err != nil || !lease.Over {
		t.Fatalf("with headroom: %+v %v", lease, err)
	}
	headroom.Store(0.1)
	if _, err := l.Acquire(ctx, shed.Request{Key: "a"}); err == nil {
		t.Fatal("admitted over the limit without headroom")
	}
	headroom.Store(0.9)
	if lease, err := l.Acquire(ctx, shed.Request{Key: "a"}); err != nil || !lease.Over {
		t.Fatalf("headroom back: %+v %v (the denied request must have given its overage unit back)", lease, err)
	}
	if _, err := l.Acquire(ctx, shed.Request{Key: "a"}); err == nil {
		t.Fatal("admitted beyond the ceiling of 6")
	}
}

// failing is a Store whose store is down.
type failing struct{ Store }

func (failing) Allow(context.Context, string, int64) (Result, error) {
	return Result{}, errors.New("redis: connection refused")
}

func TestLayerLimiterErrorAdmitsWithFallback(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	var errs []string
	var mu sync.Mutex
	l := newTestLayer(t, Config{Clock: clk,
		OnError: func(rule string, err error) { mu.Lock(); errs = append(errs, rule+": "+err.Error()); mu.Unlock() },
		Rules: []Rule{{Name: "shared", Descriptors: []Descriptor{ByClient},
			Store: &failing{mem(t, clk, TokenBucket, PerSecond(1))}}}})
	var events []shed.Event
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}, Clock: clk,
		Observer: shed.ObserverFunc(func(e shed.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var g shed.Grant
		if err := chain.Acquire(context.Background(), shed.Request{Key: "a"}, &g); err != nil {
			t.Fatalf("a limiter error became %v", err)
		}
		if !g.Leases()[0].Fallback {
			t.Fatal("Lease.Fallback not set")
		}
		g.Release(shed.Completed)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 3 || errs[0] != "shared: redis: connection refused" {
		t.Fatalf("OnError got %q", errs)
	}
	if events[0].Kind != shed.Admitted || !events[0].Fallback {
		t.Fatalf("event %+v, want an admission flagged Fallback", events[0])
	}
}

// queued counts the requests waiting in l's queues. A waiter counts once
// its queue holds it, and so once its MaxWait timer is armed.
func queued(l *Layer) int {
	l.queues.mu.Lock()
	defer l.queues.mu.Unlock()
	n := 0
	for _, kq := range l.queues.m {
		n += kq.q.Len()
	}
	return n
}

// waitQueued waits until n requests are queued in l.
func waitQueued(t *testing.T, l *Layer, n int) {
	t.Helper()
	// Queued, and at rest for a while: the tries waiters make as they enter
	// read the clock and the stores, and must not straddle a move of the
	// test's clock or a cancel.
	for i, still := 0, 0; still < 200; i++ {
		if i > 1e6 {
			t.Fatalf("%d requests queued, want %d", queued(l), n)
		}
		runtime.Gosched()
		if queued(l) == n && (l.queues == nil || l.queues.trying.Load() == 0) {
			still++
		} else {
			still = 0
		}
	}
}

func TestLayerQueueWaitsForRetryAfter(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 2, MaxWait: 5 * time.Second}},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, PerSecond(1))}}})
	ctx := context.Background()
	if _, err := l.Acquire(ctx, shed.Request{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		lease shed.Lease
		err   error
	}
	done := make(chan res, 3)
	go func() { lease, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- res{lease, err} }()
	waitQueued(t, l, 1)
	go func() { lease, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- res{lease, err} }()
	waitQueued(t, l, 2)
	// the queue is full (MaxLength 2 for the layer)
	_, err := l.Acquire(ctx, shed.Request{Key: "b", Cost: 1})
	if err != nil {
		t.Fatalf("key b has capacity and must not queue: %v", err)
	}
	if _, err := l.Acquire(ctx, shed.Request{Key: "b"}); shedtest.Rejection(t, err).Reason != "queue full" {
		t.Fatalf("third waiter: %v", err)
	}
	clk.Advance(time.Second)
	r := <-done
	if r.err != nil || r.lease.Waited != time.Second {
		t.Fatalf("first waiter: %+v %v, want admitted after 1s", r.lease, r.err)
	}
	clk.Advance(time.Second)
	r = <-done
	if r.err != nil || r.lease.Waited != 2*time.Second {
		t.Fatalf("second waiter: %+v %v, want admitted after 2s", r.lease, r.err)
	}
}

func TestLayerQueueTimesOutAndRefundWakes(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 5, MaxWait: 500 * time.Millisecond}},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerMinute(1))}}})
	ctx := context.Background()
	lease, err := l.Acquire(ctx, shed.Request{Key: "a"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- err }()
	waitQueued(t, l, 1)
	clk.Advance(500 * time.Millisecond)
	rj := shedtest.Rejection(t, <-done)
	if rj.Reason != "queue wait timed out" || rj.Waited != 500*time.Millisecond || rj.RetryAfter != time.Minute-500*time.Millisecond || rj.Status != 429 {
		t.Fatalf("rejection %+v", rj)
	}
	// a lease released Unused wakes the key's waiter at once
	go func() { _, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- err }()
	waitQueued(t, l, 1)
	lease.Release(shed.Unused)
	if err := <-done; err != nil {
		t.Fatalf("waiter not admitted on refund: %v", err)
	}
	// a cancelled waiter leaves without holding units
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := l.Acquire(cctx, shed.Request{Key: "a"}); done <- err }()
	waitQueued(t, l, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
}

func TestLayerLeakyBucketQueueShapes(t *testing.T) {
	// GCRA with burst 1 and the queue action: a burst of requests leaves at
	// a constant 100ms spacing.
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 10, MaxWait: 10 * time.Second}},
		Rules: []Rule{{Name: "k", Descriptors: []Descriptor{ByClient},
			Store: mem(t, clk, LeakyBucket, Limit{Quantity: 10, Period: time.Second, Burst: 1})}}})
	const n = 5
	waits := make(chan time.Duration, n)
	for i := 0; i < n; i++ {
		go func() {
			lease, err := l.Acquire(context.Background(), shed.Request{Key: "a"})
			if err != nil {
				t.Error(err)
			}
			waits <- lease.Waited
		}()
	}
	// one passes at once, the others queue
	waitQueued(t, l, n-1)
	if w := <-waits; w != 0 {
		t.Fatalf("first request waited %v", w)
	}
	for i := 1; i < n; i++ {
		clk.Advance(100 * time.Millisecond)
		if w := <-waits; w != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("request %d left after %v, want %v", i, w, time.Duration(i)*100*time.Millisecond)
		}
	}
}

func TestNewLayerRejectsBadConfig(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	m := mem(t, clk, TokenBucket, PerSecond(1))
	cases := []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Config.Rules"},
		{Config{Rules: []Rule{{Name: "a b", Descriptors: []Descriptor{ByClient}, Store: m}}}, "Rules[0].Name"},
		{Config{Rules: []Rule{{Name: "", Descriptors: []Descriptor{ByClient}, Store: m}}}, "Rules[0].Name"},
		{Config{Rules: []Rule{{Name: "a", Descriptors: []Descriptor{ByClient}}}}, "Rules[0].Store"},
		{Config{Rules: []Rule{{Name: "a", Store: m}}}, "Rules[0].Descriptors"},
		{Config{Rules: []Rule{{Name: "a", Descriptors: []Descriptor{{Key: "user"}}, Store: m}}}, "needs From"},
		{Config{Rules: []Rule{{Name: "a", Descriptors: []Descriptor{ByClient}, Store: m}, {Name: "a", Descriptors: []Descriptor{ByRoute}, Store: m}}}, "used twice"},
		{Config{Enforcement: shed.Enforcement{Mode: shed.Elastic}, Rules: []Rule{{Name: "a", Descriptors: []Descriptor{ByClient}, Store: m}}}, "Headroom"},
		{Config{Enforcement: shed.Enforcement{Action: shed.Queue}, Rules: []Rule{{Name: "a", Descriptors: []Descriptor{ByClient}, Store: m}}}, "MaxLength"},
		{Config{MaxKeys: -1, Rules: []Rule{{Name: "a", Descriptors: []Descriptor{ByClient}, Store: m}}}, "Config.MaxKeys"},
	}
	for _, c := range cases {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", c.cfg, err, c.field)
		}
	}
}

// localDecider says every decision came from its local fallback.
type localDecider struct{ *Memory }

func (d localDecider) Decide(ctx context.Context, key string, cost int64) (Result, bool, error) {
	r, err := d.Allow(ctx, key, cost)
	return r, true, err
}

func TestLayerFallbackDecider(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Rules: []Rule{
		{Name: "k", Descriptors: []Descriptor{ByClient}, Store: localDecider{mem(t, clk, FixedWindow, PerMinute(1))}}}})
	lease, err := l.Acquire(context.Background(), shed.Request{Key: "a"})
	if err != nil || !lease.Fallback {
		t.Fatalf("lease %+v %v, want Fallback", lease, err)
	}
	_, err = l.Acquire(context.Background(), shed.Request{Key: "a"})
	if rj := shedtest.Rejection(t, err); !rj.Fallback {
		t.Fatalf("rejection %+v, want Fallback", rj)
	}
}

func TestLayerCloseLeavesCallersLimiters(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	own := mem(t, clk, FixedWindow, PerMinute(1))
	l, err := New(Config{Clock: clk, Enforcement: shed.Enforcement{Mode: shed.Soft}, Rules: []Rule{
		{Name: "given", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerMinute(10)), Overage: own},
		{Name: "built", Descriptors: []Descriptor{ByRoute}, Store: mem(t, clk, FixedWindow, PerMinute(10))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	built := l.rules[1].ownOverage
	if built == nil || l.rules[0].ownOverage != nil {
		t.Fatal("the layer must build the overage it was not given, and only that one")
	}
	pending := clk.Pending()
	l.Close()
	if got := clk.Pending(); got != pending-1 {
		t.Fatalf("Close stopped %d sweepers, want only the built overage's", pending-got)
	}
	if built.Limit().Quantity != 1 {
		t.Fatalf("built overage %v, want 10%% of 10 per minute = 1", built.Limit())
	}
}

// TestLayerQueueStress runs many queued requests, refunds and timeouts at
// once (for the race detector) and checks that the units kept never exceed
// the limit. The clock moves only while every request still running is
// queued, so the test is as fast as the machine and never outruns it.
func TestLayerQueueStress(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	const limit, workers = 20, 8
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 100, MaxWait: time.Second}},
		Rules: []Rule{
			{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerHour(limit))},
			{Name: "ip", Descriptors: []Descriptor{byIP}, Store: mem(t, clk, SlidingLog, PerHour(1000))},
		}})
	var kept, refunded, rejected, active atomic.Int64
	active.Store(workers)
	for g := 0; g < workers; g++ {
		go func(g int) {
			defer active.Add(-1)
			ctx := context.WithValue(context.Background(), ipKey{}, "10.0.0.9")
			for i := 0; i < 10; i++ {
				prio := shed.Priorities()[(g+i)%shed.NumPriorities]
				lease, err := l.Acquire(ctx, shed.Request{Key: "hot", Priority: prio})
				if err != nil {
					rejected.Add(1)
					continue
				}
				if (g+i)%2 == 0 {
					lease.Release(shed.Unused)
					refunded.Add(1)
				} else {
					lease.Release(shed.Completed)
					kept.Add(1)
				}
			}
		}(g)
	}
	for steps := 0; active.Load() > 0; {
		if n := active.Load(); n == 0 || int64(queued(l)) != n {
			runtime.Gosched()
			continue
		}
		if steps++; steps > 2000 {
			t.Fatalf("requests still waiting after %v of clock time", time.Duration(steps)*100*time.Millisecond)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if k := kept.Load(); k > limit || k == 0 {
		t.Fatalf("kept %d units, limit %d (refunded %d, rejected %d)", k, limit, refunded.Load(), rejected.Load())
	}
	if rejected.Load() == 0 {
		t.Fatal("nothing timed out: the test exercises nothing")
	}
}

// TestLayerSoftHoldsEveryRuleToItsEpisode: a request over a key's own
// limit and over the route's gets the overage only if both the key's and
// the route's episodes allow it.
func TestLayerSoftHoldsEveryRuleToItsEpisode(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second},
		Rules: []Rule{
			{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerHour(2))},
			{Name: "per-route", Descriptors: []Descriptor{ByRoute}, Store: mem(t, clk, FixedWindow, PerHour(20))},
		}})
	ctx := context.Background()
	admitted := 0
	ask := func(key string) (shed.Lease, error) {
		lease, err := l.Acquire(ctx, shed.Request{Key: key, Route: "GET /x"})
		if err == nil {
			admitted++
		}
		return lease, err
	}
	for i := 0; i < 20; i++ {
		if _, err := ask(string(rune('a' + i/2))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	// The route's episode begins (ceiling 22).
	if lease, err := ask("fresh"); err != nil || !lease.Over {
		t.Fatalf("the route's overage: %+v %v", lease, err)
	}
	clk.Advance(31 * time.Second)
	if _, err := ask("fresh2"); err == nil {
		t.Fatal("a fresh key admitted over the route's limit past its episode")
	}
	// Key a is at its own limit, with a fresh episode; the route's is spent.
	if lease, err := ask("a"); err == nil {
		t.Fatalf("key a admitted over the route past the route's episode (over=%v): %d admitted on the route", lease.Over, admitted)
	}
	if admitted != 21 {
		t.Fatalf("%d admitted on the route, want 21", admitted)
	}
}

// TestLayerSoftSustainedOverload offers a key twice its limit (20/s
// against 10/s) for two minutes: one episode of overage (OverageFor 30s)
// from the first request over the limit, then the hard limit. Before the
// cool-down, each refill admitted a request within the limit, which ended
// the episode, and the next request over the limit began another.
func TestLayerSoftSustainedOverload(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Mode: shed.Soft, OverageFor: 30 * time.Second},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, PerSecond(10))}}})
	ctx := context.Background()
	var over [4]int
	first, last := time.Duration(-1), time.Duration(0)
	for d := time.Duration(0); d < 2*time.Minute; d += 50 * time.Millisecond {
		clk.Set(contractStart.Add(d))
		lease, err := l.Acquire(ctx, shed.Request{Key: "a"})
		if err == nil && lease.Over {
			over[d/(30*time.Second)]++
			if first < 0 {
				first = d
			}
			last = d
		}
	}
	if first < 0 || last-first > 30*time.Second || over[2]+over[3] != 0 {
		t.Fatalf("requests admitted over the limit per 30s block: %v, from +%v to +%v; want one episode of at most 30s", over, first, last)
	}
}

// TestLayerDryRunChargesNoRule: a request let through in dry run takes no
// units from any rule, neither the one that would reject it nor those that
// admitted it, as a rejection would not.
func TestLayerDryRunChargesNoRule(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk, Enforcement: shed.Enforcement{DryRun: true}, Rules: []Rule{
		{Name: "per-route", Descriptors: []Descriptor{ByRoute}, Store: mem(t, clk, FixedWindow, PerMinute(2))},
		{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerMinute(1))},
	}})
	ctx := context.Background()
	for i, tc := range []struct {
		key string
		dry bool
	}{{"a", false}, {"a", true}, {"a", true}, {"b", false}, {"c", true}} {
		lease, err := l.Acquire(ctx, shed.Request{Key: tc.key, Route: "GET /x"})
		if err != nil || lease.DryRun != tc.dry {
			t.Fatalf("request %d (key %s): %+v %v; want DryRun %v", i, tc.key, lease, err, tc.dry)
		}
		lease.Release(shed.Completed)
	}
}

// TestLayerFullQueueEvictsLowerPriority: a full queue makes room for a
// newcomer of higher priority by evicting the lowest waiter, on any key,
// as the concurrency layer's queue does; at equal priority it is full.
func TestLayerFullQueueEvictsLowerPriority(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 2, MaxWait: time.Minute}},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, FixedWindow, PerHour(1))}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, k := range []string{"a", "b"} {
		if _, err := l.Acquire(ctx, shed.Request{Key: k, Priority: shed.Critical}); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		who string
		err error
	}
	done := make(chan answer, 4)
	queue := func(who, key string, p shed.Priority, n int) {
		go func() { _, err := l.Acquire(ctx, shed.Request{Key: key, Priority: p}); done <- answer{who, err} }()
		waitQueued(t, l, n)
	}
	queue("sheddable 1", "a", shed.Sheddable, 1)
	queue("sheddable 2", "a", shed.Sheddable, 2)
	queue("critical", "a", shed.Critical, 2) // same key: the newer sheddable goes
	if a := <-done; a.who != "sheddable 2" || shedtest.Rejection(t, a.err).Reason != "evicted by higher-priority request" {
		t.Fatalf("same key: %s got %v", a.who, a.err)
	}
	queue("default", "b", shed.Default, 2) // another key: the last sheddable goes
	if a := <-done; a.who != "sheddable 1" || shedtest.Rejection(t, a.err).Reason != "evicted by higher-priority request" {
		t.Fatalf("another key: %s got %v", a.who, a.err)
	}
	_, err := l.Acquire(ctx, shed.Request{Key: "c", Priority: shed.Default})
	if err != nil {
		t.Fatalf("key c has capacity: %v", err)
	}
	_, err = l.Acquire(ctx, shed.Request{Key: "c", Priority: shed.Default})
	if rj := shedtest.Rejection(t, err); rj.Reason != "queue full" {
		t.Fatalf("a default newcomer, a critical and a default waiting: %+v", rj)
	}
	cancel()
	for i := 0; i < 2; i++ {
		if a := <-done; !errors.Is(a.err, context.Canceled) {
			t.Fatalf("%s: %v", a.who, a.err)
		}
	}
}

// TestLayerQueueTimeoutRetryAfterIsCurrent: with 1 request per 10s and a
// MaxWait of 2s, the rejection at the timeout says 8s (it said 10s, the
// figure from the first attempt).
func TestLayerQueueTimeoutRetryAfterIsCurrent(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	l := newTestLayer(t, Config{Clock: clk,
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 1, MaxWait: 2 * time.Second}},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: mem(t, clk, TokenBucket, Limit{Quantity: 1, Period: 10 * time.Second})}}})
	ctx := context.Background()
	if _, err := l.Acquire(ctx, shed.Request{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- err }()
	waitQueued(t, l, 1)
	clk.Advance(2 * time.Second)
	if rj := shedtest.Rejection(t, <-done); rj.Reason != "queue wait timed out" || rj.RetryAfter != 8*time.Second {
		t.Fatalf("rejection %+v, want a timeout with RetryAfter 8s", rj)
	}
}

// deadContextStore fails, as a Redis store does, when asked with a context
// that has ended, and counts such calls.
type deadContextStore struct {
	*Memory
	dead atomic.Int64
}

func (d *deadContextStore) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		d.dead.Add(1)
		return Result{}, err
	}
	return d.Memory.Allow(ctx, key, cost)
}

// TestLayerQueueNeverDecidesForAGoneWaiter: when waiters leave together,
// the first one out dispatches the queue while the others are still in it;
// their take must not ask the limiters with their dead contexts (a Redis
// store falls back and admits, and the grant is then refunded on a store
// that never took it).
func TestLayerQueueNeverDecidesForAGoneWaiter(t *testing.T) {
	clk := shedtest.NewClock(contractStart)
	store := &deadContextStore{Memory: mem(t, clk, FixedWindow, PerHour(1))}
	var errs atomic.Int64
	l := newTestLayer(t, Config{Clock: clk, OnError: func(string, error) { errs.Add(1) },
		Enforcement: shed.Enforcement{Action: shed.Queue, Queue: shed.QueueConfig{MaxLength: 4, MaxWait: time.Hour}},
		Rules:       []Rule{{Name: "k", Descriptors: []Descriptor{ByClient}, Store: store}}})
	if _, err := l.Acquire(context.Background(), shed.Request{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for i := 1; i <= 3; i++ {
		go func() { _, err := l.Acquire(ctx, shed.Request{Key: "a"}); done <- err }()
		waitQueued(t, l, i)
	}
	cancel()
	for i := 0; i < 3; i++ {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d: %v; want context.Canceled", i, err)
		}
	}
	if n := store.dead.Load(); n != 0 || errs.Load() != 0 {
		t.Fatalf("the store was asked %d times with a dead context (%d errors reported)", n, errs.Load())
	}
}
