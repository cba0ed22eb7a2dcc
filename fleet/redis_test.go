package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
)

// newRedisLayer builds a Layer on a client of its own, as a separate
// host would have, closed when the test ends.
func newRedisLayer(t testing.TB, opts *redis.Options, cfg Config) *Layer {
	t.Helper()
	o := *opts
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(&o)
	cfg.Client = c
	if cfg.Timeout == 0 {
		// The whole interval, not half: on a loaded test machine a round
		// trip can take tens of milliseconds, and these tests are not
		// about timeouts (TestRedisSlow is).
		cfg.Timeout = cfg.Interval
	}
	s, err := New(cfg)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); c.Close() })
	return s
}

// waitFor polls cond every millisecond until it holds or max passes, and
// returns how long it took (or -1).
func waitFor(max time.Duration, cond func() bool) time.Duration {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > max {
			return -1
		}
		time.Sleep(time.Millisecond)
	}
}

// The script on a real Redis: totals, live count, expiry by the server's
// clock, leaving, and instance ids that cannot reach outside the hash tag.
func TestRedisScript(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	a := newRedisStore(c, prefix, "a", "n1")
	evil := newRedisStore(c, prefix, "x}:{other:entries", "n2")
	if _, err := a.sync(ctx, [4]int64{1, 2, 3, 4}, time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := evil.sync(ctx, [4]int64{10, 0, 0, 5}, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.live != 2 || r.totals != [4]int64{11, 2, 3, 9} || r.collided || r.at.IsZero() {
		t.Fatalf("reading %+v", r)
	}
	keys, err := c.Keys(ctx, "*"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	want := []string{"{" + prefix + "usage}:entries", "{" + prefix + "usage}:expiry", "{" + prefix + "usage}:totals"}
	if len(keys) != 3 || keys[0] != want[0] || keys[1] != want[1] || keys[2] != want[2] {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if n, _ := c.Exists(ctx, "{other:entries}").Result(); n != 0 {
		t.Fatal("an instance id reached another key")
	}
	// The second entry expires by the server's clock.
	d := waitFor(2*time.Second, func() bool {
		r, err = a.sync(ctx, [4]int64{1, 2, 3, 4}, time.Second)
		return err == nil && r.live == 1
	})
	if d < 0 || r.totals != [4]int64{1, 2, 3, 4} {
		t.Fatalf("expired entry still counted: %+v, %v", r, err)
	}
	// Another process under the same id is noticed.
	dup := newRedisStore(c, prefix, "a", "n3")
	if r, err = dup.sync(ctx, [4]int64{0, 0, 0, 1}, time.Second); err != nil || !r.collided || r.totals != [4]int64{0, 0, 0, 1} {
		t.Fatalf("reading %+v, %v", r, err)
	}
	// Leaving removes the entry, and the last to leave removes the keys.
	if r, err = dup.sync(ctx, [4]int64{}, 0); err != nil || r.live != 0 {
		t.Fatalf("reading %+v, %v", r, err)
	}
	if n, _ := c.Exists(ctx, want...).Result(); n != 0 {
		t.Fatalf("%d keys left behind", n)
	}
	// The keys expire with their newest entry.
	if _, err := a.sync(ctx, [4]int64{1, 0, 0, 0}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, k := range want {
		if ttl, _ := c.PTTL(ctx, k).Result(); ttl <= 0 || ttl > 2*time.Second {
			t.Fatalf("%s has TTL %v", k, ttl)
		}
	}
	// Totals that lost track of the entries are counted again.
	if err := c.HSet(ctx, want[2], "2", -5).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err = a.sync(ctx, [4]int64{1, 1, 0, 0}, time.Second); err != nil || r.totals != [4]int64{1, 1, 0, 0} {
		t.Fatalf("reading %+v, %v", r, err)
	}
	a.sync(ctx, [4]int64{}, 0)
}

// event is one admission in the load test.
type event struct {
	at   time.Time // when Acquire was called: no later than the count rose
	prio int
}

type sample struct {
	at    time.Time
	usage [shed.NumPriorities]int64 // units in flight fleet-wide at priorities ≤ r
}

// fleetLoad runs mixed-priority closed-loop load on every instance: each
// worker acquires, holds for 2–8ms and releases; a rejected worker waits
// 1ms. It samples the fleet's true usage (the leases the workers hold)
// every millisecond.
type fleetLoad struct {
	ss      []*Layer
	workers [shed.NumPriorities]int // per instance

	mu       sync.Mutex
	events   []event
	samples  []sample
	admitted [shed.NumPriorities]atomic.Int64
	rejected [shed.NumPriorities]atomic.Int64
	other    atomic.Int64 // errors that are not rejections: must stay 0
	// held counts the leases the workers hold, fleet-wide, by priority: the
	// true usage. (The layers' own counts also hold, for an instant, the
	// units of a request being refused.)
	held    [shed.NumPriorities]atomic.Int64
	slowest atomic.Int64 // the slowest Acquire, ns (logged: timings are noisy here)
}

func (l *fleetLoad) run(d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range l.ss {
		for i, p := range shed.Priorities() {
			for w := 0; w < l.workers[i]; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l.worker(s, p, stop)
				}()
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			var sm sample
			sm.at = time.Now()
			var sum int64
			for r := range l.held {
				sum += l.held[r].Load()
				sm.usage[r] = sum
			}
			l.mu.Lock()
			l.samples = append(l.samples, sm)
			l.mu.Unlock()
		}
	}()
	time.Sleep(d)
	close(stop)
	wg.Wait()
}

func (l *fleetLoad) worker(s *Layer, p shed.Priority, stop chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		ls, err := s.Acquire(ctx, shed.Request{Priority: p})
		if d := int64(time.Since(start)); d > l.slowest.Load() {
			l.slowest.Store(d) // racy max: a log figure, not a check
		}
		if err != nil {
			var r *shed.Rejection
			if !errors.As(err, &r) {
				l.other.Add(1)
			}
			l.rejected[p.Index()].Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		l.held[p.Index()].Add(1)
		l.admitted[p.Index()].Add(1)
		l.mu.Lock()
		l.events = append(l.events, event{at: start, prio: p.Index()})
		l.mu.Unlock()
		time.Sleep(time.Duration(2+rand.IntN(7)) * time.Millisecond)
		l.held[p.Index()].Add(-1)
		ls.Release(shed.Completed)
	}
}

// check compares every sample with the bound: usage at priorities ≤ r is
// at most ceiling r plus what the fleet admitted at priorities ≤ r within
// the window before it. It returns the largest overshoot seen per class and
// the bound at that sample.
func (l *fleetLoad) check(t *testing.T, ceil [shed.NumPriorities]int64, window time.Duration) (over, bound [shed.NumPriorities]int64) {
	t.Helper()
	ev := l.events
	sort.Slice(ev, func(i, j int) bool { return ev[i].at.Before(ev[j].at) })
	for _, sm := range l.samples {
		lo := sort.Search(len(ev), func(i int) bool { return !ev[i].at.Before(sm.at.Add(-window)) })
		hi := sort.Search(len(ev), func(i int) bool { return ev[i].at.After(sm.at) })
		var adm [shed.NumPriorities]int64
		for _, e := range ev[lo:hi] {
			for r := e.prio; r < shed.NumPriorities; r++ {
				adm[r]++
			}
		}
		for r := range ceil {
			o := sm.usage[r] - ceil[r]
			if o > adm[r] {
				t.Errorf("at %v: usage at priorities ≤ %s is %d, ceiling %d + admitted within %v %d",
					sm.at.Format("15:04:05.000"), shed.Priorities()[r], sm.usage[r], ceil[r], window, adm[r])
			}
			if o > over[r] {
				over[r], bound[r] = o, adm[r]
			}
		}
	}
	return over, bound
}

// Several instances in one process, each with its own client, under
// mixed-priority load: each class's fleet-wide usage stays within its
// ceiling plus the bound, and critical requests get through while the
// fleet is full of lower-priority work.
func TestRedisFleetUnderMixedLoad(t *testing.T) {
	opts := redistest.Options(t)
	redistest.Client(t) // skips, or fails, without a server
	const interval = 50 * time.Millisecond
	cfg := Config{Prefix: redistest.Prefix(t), Capacity: 40, Interval: interval}
	l := &fleetLoad{workers: [4]int{2, 8, 8, 1}}
	for _, id := range []string{"a", "b", "c"} {
		c := cfg
		c.Instance = id
		l.ss = append(l.ss, newRedisLayer(t, opts, c))
	}
	// The load starts once every instance counts the others: a start, when
	// an instance admits against the instances it has seen so far, is the
	// worst case (TestOvershootOnlyFromStaleEntries), not the steady one
	// this test measures.
	for _, s := range l.ss {
		if waitFor(2*time.Second, func() bool { return s.Stats().Instances == 3 }) < 0 {
			t.Fatalf("instances never saw each other: %+v", s.Stats())
		}
	}
	l.run(1500 * time.Millisecond)
	ceil := l.ss[0].Stats().Ceilings
	if ceil != [4]int64{4, 24, 32, 40} {
		t.Fatalf("ceilings %v", ceil)
	}
	// One interval of staleness, plus one more for the ticks' latency and
	// delays on a loaded machine under -race.
	window := 2 * interval
	over, bound := l.check(t, ceil, window)
	t.Logf("%d samples, %d admissions; largest overshoot by class (test-mode … critical) %v, bound at that sample %v",
		len(l.samples), len(l.events), over, bound)
	var adm, rej [4]int64
	for i := range adm {
		adm[i], rej[i] = l.admitted[i].Load(), l.rejected[i].Load()
	}
	t.Logf("admitted %v, rejected %v", adm, rej)
	t.Logf("slowest Acquire %v", time.Duration(l.slowest.Load()))
	if l.other.Load() != 0 {
		t.Fatalf("%d errors other than rejections", l.other.Load())
	}
	if rej[1] == 0 || rej[2] == 0 {
		t.Fatalf("sheddable and default work was never refused (rejected %v): the fleet was not full", rej)
	}
	// Critical: 3 workers against a reservation of 8 units.
	if adm[3] == 0 || float64(rej[3]) > 0.01*float64(adm[3]) {
		t.Fatalf("critical: %d admitted, %d rejected while lower work filled the fleet", adm[3], rej[3])
	}
	for _, s := range l.ss {
		// Failures are logged, not checked: on a loaded machine a tick may
		// miss its 25ms timeout.
		if st := s.Stats(); st.Instances != 3 || st.Collisions != 0 || st.Ticks < 10 {
			t.Fatalf("stats %+v", st)
		} else {
			t.Logf("instance: %d ticks, %d failed", st.Ticks, st.Failures)
		}
	}
}

// A stopped instance's counts leave the others' totals within 3 intervals.
func TestRedisStoppedInstanceVanishes(t *testing.T) {
	opts := redistest.Options(t)
	redistest.Client(t)
	const interval = 100 * time.Millisecond
	cfg := Config{Prefix: redistest.Prefix(t), Capacity: 100, Interval: interval}
	cfg.Instance = "a"
	a := newRedisLayer(t, opts, cfg)
	cfg.Instance = "b"
	b := newRedisLayer(t, opts, cfg)
	for i := 0; i < 7; i++ {
		if _, err := b.Acquire(context.Background(), shed.Request{Priority: shed.Default}); err != nil {
			t.Fatal(err)
		}
	}
	if waitFor(time.Second, func() bool { return a.Stats().Fleet[shed.Default.Index()] == 7 }) < 0 {
		t.Fatalf("a never saw b's counts: %+v", a.Stats())
	}
	b.halt() // as a crash: no leave
	d := waitFor(time.Second, func() bool { st := a.Stats(); return st.Fleet[shed.Default.Index()] == 0 && st.Instances == 1 })
	t.Logf("stopped instance left the totals after %v (interval %v)", d, interval)
	// 3 intervals (TTL 2 intervals after the last publish, seen at the next
	// tick; TestStoppedInstanceVanishesWithinThreeIntervals checks it
	// exactly on a manual clock), plus one of slack for ticks that run
	// late on a loaded machine.
	if d < 0 || d > 4*interval {
		t.Fatalf("stopped instance left after %v, want within 3 intervals (%v) and some slack", d, 3*interval)
	}
}

// redis-server killed and restarted mid-run: no request fails or waits,
// decisions are marked fallback while it is gone, and the layer is back on
// fleet totals within one interval of Redis answering again.
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.StartServer(t)
	const interval = 50 * time.Millisecond
	// No retries within a tick (the next tick is the retry): each failed
	// tick then counts one failed dial toward go-redis's dial breaker, which
	// after PoolSize of them stops dialing for up to a second.
	opts := &redis.Options{Addr: srv.Addr(), MaxRetries: -1}
	cfg := Config{Prefix: "fleet-restart", Capacity: 40, Interval: interval}
	l := &fleetLoad{workers: [4]int{1, 4, 4, 1}}
	for _, id := range []string{"a", "b"} {
		c := cfg
		c.Instance = id
		l.ss = append(l.ss, newRedisLayer(t, opts, c))
	}
	var back [2]time.Duration
	var lateTicks [2]int64
	var sawFallback [2]bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(300 * time.Millisecond)
		srv.Kill()
		for i, s := range l.ss {
			sawFallback[i] = waitFor(time.Second, func() bool { return s.Stats().Fallback }) >= 0
		}
		time.Sleep(300 * time.Millisecond)
		srv.Restart() // returns once the server answers
		up := time.Now()
		var tried [2]int64
		for i, s := range l.ss {
			st := s.Stats()
			tried[i] = st.Ticks + st.Failures
		}
		for i, s := range l.ss {
			if waitFor(2*time.Second, func() bool { return !s.Stats().Fallback }) < 0 {
				back[i] = -1
				continue
			}
			back[i] = time.Since(up)
			st := s.Stats()
			// Attempts that ended after Redis answered, before the one
			// that succeeded: at most one, the tick already waiting on the
			// dead server when it came back.
			lateTicks[i] = st.Ticks + st.Failures - tried[i] - 1
		}
	}()
	l.run(1500 * time.Millisecond)
	wg.Wait()
	t.Logf("back on fleet totals %v after Redis answered (interval %v), after %v failed attempts; admitted critical %d, rejected %d",
		back, interval, lateTicks, l.admitted[3].Load(), l.rejected[3].Load())
	t.Logf("slowest Acquire %v", time.Duration(l.slowest.Load()))
	if l.other.Load() != 0 {
		t.Fatalf("%d errors other than rejections", l.other.Load())
	}
	for i := range back {
		if !sawFallback[i] {
			t.Errorf("instance %d never went to fallback", i)
		}
		// Back at the first tick that started after Redis answered: within
		// one interval, counted in ticks, since on a loaded machine the
		// ticks themselves may run late.
		if back[i] < 0 || lateTicks[i] > 1 {
			t.Errorf("instance %d back on fleet totals after %v and %d failed attempts, want the first tick after Redis answered", i, back[i], lateTicks[i])
		}
	}
	if l.rejected[3].Load() != 0 {
		t.Errorf("%d critical requests rejected", l.rejected[3].Load())
	}
	for _, s := range l.ss {
		if waitFor(time.Second, func() bool { st := s.Stats(); return st.Instances == 2 && !st.Fallback }) < 0 {
			t.Errorf("stats after the restart %+v", s.Stats())
		}
	}
}

// A Redis that is slow rather than gone (CLIENT PAUSE holds every client's
// commands) puts the layer in fallback once a tick runs past its timeout,
// requests keep being decided at once meanwhile, and the first tick after
// the pause puts the layer back on fleet totals.
func TestRedisSlow(t *testing.T) {
	srv := redistest.StartServer(t)
	const interval = 50 * time.Millisecond
	s := newRedisLayer(t, &redis.Options{Addr: srv.Addr()}, Config{Prefix: "fleet-slow", Instance: "a", Capacity: 40, Interval: interval})
	if waitFor(2*time.Second, func() bool { return !s.Stats().Fallback }) < 0 {
		t.Fatalf("stats before the pause %+v", s.Stats())
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	const pause = 600 * time.Millisecond
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	if waitFor(time.Second, func() bool { return s.Stats().Fallback }) < 0 {
		t.Fatalf("no fallback while Redis was paused: %+v", s.Stats())
	}
	// Decided at once, from this instance's share (40 ÷ 1).
	ls := admit(t, s, shed.Sheddable, 24)
	r := refused(t, s, shed.Sheddable)
	if time.Since(paused) > pause-100*time.Millisecond {
		t.Skipf("the machine is too slow to check the pause from inside it (%v)", time.Since(paused))
	}
	if !ls[0].Fallback || !r.Fallback {
		t.Fatal("decisions during the pause not marked fallback")
	}
	releaseAll(ls)
	d := waitFor(3*time.Second, func() bool { return !s.Stats().Fallback })
	if d < 0 {
		t.Fatalf("still in fallback after the pause: %+v", s.Stats())
	}
	t.Logf("back on fleet totals %v after the pause began (pause %v, interval %v)", time.Since(paused), pause, interval)
	// The sync's context or its connection's deadline (go-redis sets it
	// from the context's), whichever the runtime notices first.
	if st := s.Stats(); !errors.Is(st.LastError, context.DeadlineExceeded) && !errors.Is(st.LastError, os.ErrDeadlineExceeded) {
		t.Fatalf("last error %v, want a deadline", st.LastError)
	}
}
