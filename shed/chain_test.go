package shed_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// t0 is the manual clocks' start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// trace records, in order, what the layers of a chain did.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	tr.events = append(tr.events, s)
	tr.mu.Unlock()
}

func (tr *trace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.events, " ")
}

// traced returns test layers that record their acquires and releases in tr.
func traced(tr *trace, names ...string) []*shedtest.Layer {
	ls := make([]*shedtest.Layer, len(names))
	for i, n := range names {
		l := shedtest.NewLayer(n)
		l.OnAcquire = func(context.Context, shed.Request) { tr.add("acquire:" + n) }
		l.OnRelease = func(_ *shed.Lease, o shed.Outcome) { tr.add("release:" + n + ":" + o.String()) }
		ls[i] = l
	}
	return ls
}

func chainOf(t *testing.T, obs shed.Observer, ls ...*shedtest.Layer) *shed.Chain {
	t.Helper()
	layers := make([]shed.Layer, len(ls))
	for i, l := range ls {
		layers[i] = l
	}
	c, err := shed.NewChain(shed.Config{Layers: layers, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewChainErrors(t *testing.T) {
	l := shedtest.NewLayer("a")
	tooMany := make([]shed.Layer, shed.MaxLayers+1)
	for i := range tooMany {
		tooMany[i] = l
	}
	for _, tc := range []struct {
		name   string
		layers []shed.Layer
		want   []string
	}{
		{"nil", nil, []string{"Config.Layers", "empty"}},
		{"empty", []shed.Layer{}, []string{"Config.Layers", "empty"}},
		{"nil layer", []shed.Layer{l, nil}, []string{"Config.Layers[1]", "nil"}},
		{"too many", tooMany, []string{"Config.Layers", fmt.Sprint(shed.MaxLayers + 1), fmt.Sprint(shed.MaxLayers)}},
	} {
		c, err := shed.NewChain(shed.Config{Layers: tc.layers})
		if err == nil || c != nil {
			t.Errorf("%s: NewChain = %v, %v; want an error", tc.name, c, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
	max := make([]shed.Layer, shed.MaxLayers)
	for i := range max {
		max[i] = shedtest.NewLayer(fmt.Sprint("l", i))
	}
	c, err := shed.NewChain(shed.Config{Layers: max})
	if err != nil {
		t.Fatalf("NewChain with MaxLayers layers: %v", err)
	}
	got := c.Layers()
	if len(got) != shed.MaxLayers || got[0] != max[0] || got[shed.MaxLayers-1] != max[shed.MaxLayers-1] {
		t.Fatalf("Layers() = %v", got)
	}
	got[0] = nil // a copy: the chain is unaffected
	if c.Layers()[0] == nil {
		t.Fatal("Layers() exposes the chain's own slice")
	}
}

func TestChainRunsLayersInOrderAndReleasesInReverse(t *testing.T) {
	var tr trace
	ls := traced(&tr, "a", "b", "c")
	c := chainOf(t, nil, ls...)
	var g shed.Grant
	if err := c.Acquire(context.Background(), shed.Request{Key: "k"}, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Leases()) != 3 {
		t.Fatalf("%d leases, want 3", len(g.Leases()))
	}
	g.Release(shed.Completed)
	g.Release(shed.Failed) // a second release does nothing
	want := "acquire:a acquire:b acquire:c release:c:completed release:b:completed release:a:completed"
	if tr.String() != want {
		t.Fatalf("trace %q\nwant  %q", tr.String(), want)
	}
	for _, l := range ls {
		if l.Acquired() != 1 || l.Released(shed.Completed) != 1 || l.Held() != 0 {
			t.Errorf("%s: acquired %d, completed %d, held %d", l.Name(), l.Acquired(), l.Released(shed.Completed), l.Held())
		}
	}
	var zero shed.Grant
	zero.Release(shed.Completed) // holds nothing: no effect, no panic
}

func TestChainRejectionReleasesEarlierLeasesUnused(t *testing.T) {
	var tr trace
	ls := traced(&tr, "a", "b", "c", "d")
	rej := shed.Shed("overloaded", time.Second)
	ls[2].Reject(rej)
	c := chainOf(t, nil, ls...)
	var g shed.Grant
	err := c.Acquire(context.Background(), shed.Request{Priority: shed.Sheddable}, &g)
	var got *shed.Rejection
	if !errors.As(err, &got) || got.Reason != rej.Reason || got.Layer != "c" || got.Priority != shed.Sheddable ||
		!errors.Is(err, shed.ErrRejected) {
		t.Fatalf("Acquire = %v; want the layer's rejection, stamped with its name and the priority", err)
	}
	want := "acquire:a acquire:b acquire:c release:b:unused release:a:unused"
	if tr.String() != want {
		t.Fatalf("trace %q\nwant  %q", tr.String(), want)
	}
	if len(g.Leases()) != 0 {
		t.Fatalf("a rejected grant holds %d leases", len(g.Leases()))
	}
	g.Release(shed.Completed)
	if ls[0].Released(shed.Unused) != 1 || ls[0].ReleasedTotal() != 1 || ls[3].Acquired() != 0 {
		t.Fatal("leases released more than once, or a layer after the rejection ran")
	}

	// The same grant can be reused once the layer admits again.
	ls[2].Admit()
	if err := c.Acquire(context.Background(), shed.Request{}, &g); err != nil || len(g.Leases()) != 4 {
		t.Fatalf("reuse: %v, %d leases", err, len(g.Leases()))
	}
	g.Release(shed.Completed)
	for _, l := range ls {
		if l.Held() != 0 {
			t.Errorf("%s holds %d", l.Name(), l.Held())
		}
	}
}

func TestChainFirstLayerRejects(t *testing.T) {
	var tr trace
	ls := traced(&tr, "a", "b")
	ls[0].Reject(shed.Throttled("rate limit exceeded", 0))
	c := chainOf(t, nil, ls...)
	ran := false
	err := c.Do(context.Background(), shed.Request{}, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, shed.ErrRejected) || ran {
		t.Fatalf("Do = %v, fn ran %v; want a rejection and fn not run", err, ran)
	}
	if tr.String() != "acquire:a" {
		t.Fatalf("trace %q", tr.String())
	}
}

func TestDoOutcomes(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, cancel func()) error
		err  error
		want shed.Outcome
	}{
		{"completed", func(context.Context, func()) error { return nil }, nil, shed.Completed},
		{"failed", func(context.Context, func()) error { return boom }, boom, shed.Failed},
		{"dropped", func(ctx context.Context, cancel func()) error { cancel(); return ctx.Err() }, context.Canceled, shed.Dropped},
		{"dropped though fn said nil", func(_ context.Context, cancel func()) error { cancel(); return nil }, nil, shed.Dropped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr trace
			ls := traced(&tr, "a", "b")
			c := chainOf(t, nil, ls...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := c.Do(ctx, shed.Request{}, func(ctx context.Context) error { return tc.fn(ctx, cancel) })
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Do = %v, want %v", err, tc.err)
			}
			want := fmt.Sprintf("acquire:a acquire:b release:b:%v release:a:%v", tc.want, tc.want)
			if tr.String() != want {
				t.Fatalf("trace %q\nwant  %q", tr.String(), want)
			}
		})
	}
}

func TestDoPanicReleasesAndPropagates(t *testing.T) {
	var tr trace
	ls := traced(&tr, "a", "b", "c")
	var events []shed.Event
	c := chainOf(t, shed.ObserverFunc(func(e shed.Event) { events = append(events, e) }), ls...)
	func() {
		defer func() {
			if r := recover(); r != "handler bug" {
				t.Fatalf("recovered %v; want the handler's panic", r)
			}
		}()
		_ = c.Do(context.Background(), shed.Request{}, func(context.Context) error { panic("handler bug") })
		t.Fatal("Do returned after fn panicked")
	}()
	want := "acquire:a acquire:b acquire:c release:c:failed release:b:failed release:a:failed"
	if tr.String() != want {
		t.Fatalf("trace %q\nwant  %q", tr.String(), want)
	}
	var released int
	for _, e := range events {
		if e.Kind == shed.Released {
			released++
			if e.Outcome != shed.Failed {
				t.Errorf("released event %+v, want outcome failed", e)
			}
		}
	}
	if released != 3 {
		t.Fatalf("%d released events, want 3", released)
	}
}

func TestDoPassesContext(t *testing.T) {
	c := chainOf(t, nil, shedtest.NewLayer("a"))
	type k struct{}
	ctx := context.WithValue(context.Background(), k{}, "v")
	err := c.Do(ctx, shed.Request{}, func(got context.Context) error {
		if got.Value(k{}) != "v" {
			return errors.New("fn did not get the caller's context")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flagLayer admits with the flags a real layer may set on its lease.
type flagLayer struct {
	name  string
	clock *shedtest.Clock
	took  time.Duration
	lease shed.Lease
}

func (l *flagLayer) Name() string { return l.name }

func (l *flagLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	l.clock.Advance(l.took)
	lease := shed.NewLease(l)
	lease.DryRun, lease.Over, lease.Waited, lease.Fallback = l.lease.DryRun, l.lease.Over, l.lease.Waited, l.lease.Fallback
	lease.Quota = l.lease.Quota
	return lease, nil
}

func (l *flagLayer) Release(*shed.Lease, shed.Outcome) {}

func TestChainObserver(t *testing.T) {
	clock := shedtest.NewClock(t0)
	var mu sync.Mutex
	var events []shed.Event
	obs := shed.ObserverFunc(func(e shed.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	var second []shed.Event
	queued := &flagLayer{name: "queued", clock: clock, took: 40 * time.Millisecond,
		lease: shed.Lease{Waited: 40 * time.Millisecond, Over: true}}
	dry := &flagLayer{name: "dry", clock: clock, took: time.Millisecond, lease: shed.Lease{DryRun: true, Fallback: true}}
	last := shedtest.NewLayer("last")
	c, err := shed.NewChain(shed.Config{
		Layers:   []shed.Layer{queued, dry, last},
		Observer: shed.Observers{obs, shed.ObserverFunc(func(e shed.Event) { second = append(second, e) })},
		Clock:    clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := shed.Request{Priority: shed.Critical}
	if err := c.Do(context.Background(), req, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	want := []shed.Event{
		{Layer: "queued", Priority: shed.Critical, Kind: shed.Admitted, Queued: true, Wait: 40 * time.Millisecond,
			Over: true, Latency: 40 * time.Millisecond},
		{Layer: "dry", Priority: shed.Critical, Kind: shed.WouldReject, Fallback: true, Latency: time.Millisecond},
		{Layer: "last", Priority: shed.Critical, Kind: shed.Admitted},
		{Layer: "last", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Completed},
		{Layer: "dry", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Completed},
		{Layer: "queued", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Completed},
	}
	checkEvents(t, events, want)
	checkEvents(t, second, want)

	// A rejection after a wait, then a context error.
	events = nil
	// Events carry the route and the policy that decided.
	rej := shed.Shed("queue wait timed out", 0, shed.Quota{Policy: "overall", Limit: 4})
	rej.Waited = 3 * time.Second
	last.Reject(rej)
	queued.took, queued.lease = 0, shed.Lease{Quota: shed.Quota{Policy: "per-key", Limit: 9}}
	dry.took, dry.lease = 0, shed.Lease{}
	routed := shed.Request{Priority: shed.Critical, Route: "GET /x/{id}"}
	if err := c.Do(context.Background(), routed, nil); !errors.Is(err, shed.ErrRejected) {
		t.Fatalf("Do = %v", err)
	}
	checkEvents(t, events, []shed.Event{
		{Layer: "queued", Priority: shed.Critical, Kind: shed.Admitted, Policy: "per-key", Route: "GET /x/{id}"},
		{Layer: "dry", Priority: shed.Critical, Kind: shed.Admitted, Route: "GET /x/{id}"},
		{Layer: "last", Priority: shed.Critical, Kind: shed.Rejected, Status: shed.StatusServiceUnavailable,
			Queued: true, Wait: 3 * time.Second, Policy: "overall", Route: "GET /x/{id}", Reason: "queue wait timed out"},
		{Layer: "dry", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Unused, Route: "GET /x/{id}"},
		{Layer: "queued", Priority: shed.Critical, Kind: shed.Released, Outcome: shed.Unused, Policy: "per-key", Route: "GET /x/{id}"},
	})
	events = nil
	last.Reject(fmt.Errorf("gave up: %w", context.DeadlineExceeded))
	if err := c.Do(context.Background(), req, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v", err)
	}
	if e := events[2]; e.Kind != shed.Rejected || e.Status != 0 || e.Layer != "last" {
		t.Fatalf("event for a context error: %+v", e)
	}
}

func checkEvents(t *testing.T, got, want []shed.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d:\n got %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestEventKindWords(t *testing.T) {
	for k, w := range map[shed.EventKind]string{shed.Admitted: "admitted", shed.Rejected: "rejected",
		shed.WouldReject: "would_reject", shed.Released: "released", shed.EventKind(9): "event(?)"} {
		if k.String() != w {
			t.Errorf("%d: %q, want %q", k, k.String(), w)
		}
	}
}

func TestChainPreparesRequest(t *testing.T) {
	dl := t0.Add(time.Minute)
	ctxDL, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	own := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		in   shed.Request
		want shed.Request
	}{
		{"cost floor", context.Background(), shed.Request{Cost: 0}, shed.Request{Cost: 1, Priority: shed.Default}},
		{"negative cost", context.Background(), shed.Request{Cost: -5}, shed.Request{Cost: 1, Priority: shed.Default}},
		{"cost kept", context.Background(), shed.Request{Cost: 7}, shed.Request{Cost: 7, Priority: shed.Default}},
		{"deadline from ctx", ctxDL, shed.Request{}, shed.Request{Cost: 1, Deadline: dl, Priority: shed.Default}},
		{"own deadline wins", ctxDL, shed.Request{Deadline: own}, shed.Request{Cost: 1, Deadline: own, Priority: shed.Default}},
		{"priority from ctx", shed.WithPriority(context.Background(), shed.Critical), shed.Request{},
			shed.Request{Cost: 1, Priority: shed.Critical}},
		{"own priority wins", shed.WithPriority(context.Background(), shed.Critical), shed.Request{Priority: shed.Sheddable},
			shed.Request{Cost: 1, Priority: shed.Sheddable}},
		// Default on purpose is not "unset": the context does not override it.
		{"own default wins", shed.WithPriority(context.Background(), shed.Critical), shed.Request{Priority: shed.Default},
			shed.Request{Cost: 1, Priority: shed.Default}},
		{"unset in ctx", shed.WithPriority(context.Background(), shed.Unset), shed.Request{},
			shed.Request{Cost: 1, Priority: shed.Default}},
		{"invalid resolved", context.Background(), shed.Request{Priority: 42},
			shed.Request{Cost: 1, Priority: shed.Default}},
		{"key and route kept", context.Background(), shed.Request{Key: "k", Route: "GET /x"},
			shed.Request{Key: "k", Route: "GET /x", Cost: 1, Priority: shed.Default}},
	} {
		var got shed.Request
		l := shedtest.NewLayer("l")
		l.OnAcquire = func(_ context.Context, req shed.Request) { got = req }
		c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(tc.ctx, tc.in, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: the layer saw %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if p, ok := shed.PriorityFrom(context.Background()); ok || p != shed.Unset {
		t.Errorf("PriorityFrom(Background) = %v, %v", p, ok)
	}
	for _, tc := range []struct{ cost, units int64 }{{-1, 1}, {0, 1}, {1, 1}, {9, 9}} {
		if u := (shed.Request{Cost: tc.cost}).Units(); u != tc.units {
			t.Errorf("Units(cost %d) = %d", tc.cost, u)
		}
	}
}

func TestChainLayersSeePreparedRequest(t *testing.T) {
	var seen []shed.Request
	l := shedtest.NewLayer("a")
	l.OnAcquire = func(_ context.Context, r shed.Request) { seen = append(seen, r) }
	l.Quota = shed.Quota{Policy: "per-key", Limit: 10, Window: time.Second, Remaining: 9}
	c := chainOf(t, nil, l)
	dl := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(shed.WithPriority(context.Background(), shed.TestMode), dl)
	defer cancel()
	var g shed.Grant
	if err := c.Acquire(ctx, shed.Request{Key: "k"}, &g); err != nil {
		t.Fatal(err)
	}
	defer g.Release(shed.Completed)
	want := shed.Request{Key: "k", Priority: shed.TestMode, Cost: 1, Deadline: dl}
	if len(seen) != 1 || seen[0] != want || g.Request() != want {
		t.Fatalf("layer saw %+v, grant says %+v; want %+v", seen, g.Request(), want)
	}
	if q := g.Leases()[0].Quota; q != l.Quota || g.Leases()[0].Cost != 1 {
		t.Fatalf("lease %+v", g.Leases()[0])
	}
}

func TestChainConcurrent(t *testing.T) {
	ls := []*shedtest.Layer{shedtest.NewLayer("a"), shedtest.NewLayer("b"), shedtest.NewLayer("c")}
	var mu sync.Mutex
	n := 0
	c := chainOf(t, shed.ObserverFunc(func(shed.Event) { mu.Lock(); n++; mu.Unlock() }), ls...)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if i == 0 && j == 100 {
					ls[2].Reject(shed.Shed("x", 0))
				}
				_ = c.Do(context.Background(), shed.Request{}, func(context.Context) error { return nil })
			}
		}(i)
	}
	wg.Wait()
	for _, l := range ls {
		if l.Held() != 0 {
			t.Errorf("%s holds %d leases after every Do returned", l.Name(), l.Held())
		}
	}
	if ls[0].Acquired() != 1600 {
		t.Errorf("first layer acquired %d, want 1600", ls[0].Acquired())
	}
	if n == 0 {
		t.Error("observer saw nothing")
	}
}

func TestLeaseReleaseOnce(t *testing.T) {
	l := shedtest.NewLayer("a")
	lease, err := l.Acquire(context.Background(), shed.Request{Cost: 3})
	if err != nil || !lease.Held() || lease.Cost != 3 {
		t.Fatalf("lease %+v, %v", lease, err)
	}
	lease.Release(shed.Dropped)
	lease.Release(shed.Completed)
	if lease.Held() || l.Released(shed.Dropped) != 1 || l.ReleasedTotal() != 1 {
		t.Fatalf("held %v, dropped %d, total %d", lease.Held(), l.Released(shed.Dropped), l.ReleasedTotal())
	}
	var zero shed.Lease
	zero.Release(shed.Completed)
	if (shed.Quota{}).IsZero() != true || (shed.Quota{Limit: 1}).IsZero() {
		t.Fatal("Quota.IsZero")
	}
}

func TestRejection(t *testing.T) {
	l := shedtest.NewLayer("ratelimit")
	l.Reject(shed.Throttled("rate limit exceeded", 1500*time.Millisecond,
		shed.Quota{Policy: "per-key", Limit: 10, Window: time.Second}))
	c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
	if err != nil {
		t.Fatal(err)
	}
	// The chain stamps the layer's name and the resolved priority.
	r := shedtest.Rejection(t, c.Do(context.Background(), shed.Request{Priority: shed.Sheddable},
		func(context.Context) error { return nil }))
	if r.Status != 429 || r.Layer != "ratelimit" || r.Priority != shed.Sheddable || len(r.Policies) != 1 {
		t.Fatalf("Throttled through the chain = %+v", r)
	}
	if got, want := r.Error(), "shed: ratelimit rejected sheddable request (429): rate limit exceeded, retry after 1.5s"; got != want {
		t.Errorf("Error() = %q\nwant      %q", got, want)
	}
	if r.RetryAfterSeconds() != 2 {
		t.Errorf("RetryAfterSeconds = %d, want 2 (rounded up)", r.RetryAfterSeconds())
	}
	s := shed.Shed("overloaded", 0)
	if s.Status != 503 || s.RetryAfterSeconds() != 0 || strings.Contains(s.Error(), "retry") {
		t.Errorf("Shed = %+v, %q", s, s.Error())
	}
	if got, want := s.Error(), "shed: layer rejected a request (503): overloaded"; got != want {
		t.Errorf("Error() of an unstamped rejection = %q, want %q", got, want)
	}
	err = fmt.Errorf("layer said: %w", s)
	var got *shed.Rejection
	if !errors.As(err, &got) || got != s || !errors.Is(err, shed.ErrRejected) {
		t.Errorf("errors.As/Is through wrapping failed")
	}
	if errors.Is(errors.New("other"), shed.ErrRejected) {
		t.Error("a plain error matches ErrRejected")
	}
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59500 * time.Millisecond, 60}} {
		if got := shed.CeilSeconds(tc.d); got != tc.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// A layer that panics in Acquire must not leak the leases the layers before
// it granted; the panic still reaches the caller.
func TestChainLayerPanicReleasesEarlierLeases(t *testing.T) {
	first, second := shedtest.NewLayer("first"), shedtest.NewLayer("second")
	second.OnAcquire = func(context.Context, shed.Request) { panic("layer bug") }
	c := chainOf(t, nil, first, second)
	func() {
		defer func() {
			if r := recover(); r != "layer bug" {
				t.Fatalf("recovered %v, want the layer's panic", r)
			}
		}()
		var g shed.Grant
		_ = c.Acquire(context.Background(), shed.Request{}, &g)
		t.Fatal("Acquire returned; want the panic to propagate")
	}()
	if got := first.Released(shed.Unused); got != 1 {
		t.Fatalf("first layer released %d leases Unused, want 1", got)
	}
	if first.Held() != 0 {
		t.Fatalf("first layer still holds %d leases", first.Held())
	}
}
