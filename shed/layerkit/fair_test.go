package layerkit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// simClient is one client of the simulated service: its key, priority,
// the requests it offers per second and how long each holds a slot.
type simClient struct {
	key     string
	prio    shed.Priority
	rate    float64
	service time.Duration
	weight  float64
	// active says whether the client sends at time t (since the start);
	// nil: always.
	active func(t time.Duration) bool

	acc               float64
	offered, served   int
	refused, inWindow int
	errs              map[string]int
}

// fairSim runs clients against a fair queue in front of slots slots on a
// manual clock, in steps of 1ms, for d, and counts each client's grants
// after warm (the window).
type fairSim struct {
	t       *testing.T
	q       *WaitQueue
	clock   *shedtest.Clock
	slots   int64
	inUse   atomic.Int64
	clients []*simClient
	keyOf   func(c *simClient, n int) string // nil: c.key
	// mix interleaves the clients' arrivals within each step at random
	// (else in the order of clients, the first ahead).
	mix *rand.Rand

	spawned, received int
	counting          bool
	results           chan simResult
	held              []simHold
}

type simResult struct {
	c   *simClient
	t   Ticket
	err error
}

type simHold struct {
	c     *simClient
	t     Ticket
	until time.Time
}

func newFairSim(t *testing.T, slots int64, f Fairness, clients ...*simClient) *fairSim {
	t.Helper()
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	q, err := NewFairQueue(shed.QueueConfig{MaxLength: 200, MaxWait: 250 * time.Millisecond, Clock: clock}, f)
	if err != nil {
		t.Fatal(err)
	}
	return &fairSim{t: t, q: q, clock: clock, slots: slots, clients: clients, results: make(chan simResult, 1<<16)}
}

// settle collects the answers of every waiter that left the queue.
func (s *fairSim) settle() {
	for s.spawned != s.q.Len()+s.received {
		select {
		case r := <-s.results:
			s.received++
			if r.err != nil {
				r.c.refused++
				if r.c.errs == nil {
					r.c.errs = map[string]int{}
				}
				r.c.errs[r.err.Error()]++
				continue
			}
			if s.counting {
				r.c.served++
			}
			s.held = append(s.held, simHold{c: r.c, t: r.t, until: s.clock.Now().Add(r.c.service)})
		default:
			runtime.Gosched()
		}
	}
}

func (s *fairSim) run(d, warm time.Duration) {
	const step = time.Millisecond
	start := s.clock.Now()
	take := func() bool {
		for {
			n := s.inUse.Load()
			if n >= s.slots {
				return false
			}
			if s.inUse.CompareAndSwap(n, n+1) {
				return true
			}
		}
	}
	giveBack := func() { s.inUse.Add(-1) }
	for el := time.Duration(0); el < d; el += step {
		counting := el >= warm
		s.counting = counting
		order := s.clients
		if s.mix != nil {
			order = slices.Clone(order)
			s.mix.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, c := range order {
			if c.active != nil && !c.active(el) {
				continue
			}
			c.acc += c.rate * step.Seconds()
			for ; c.acc >= 1; c.acc-- {
				if counting {
					c.offered++
				}
				key := c.key
				if s.keyOf != nil {
					key = s.keyOf(c, s.spawned)
				}
				req := shed.Request{Key: key, Priority: c.prio}
				s.spawned++
				c := c
				go func() {
					t, _, err := s.q.WaitRequest(context.Background(), req, time.Time{}, take, giveBack)
					s.results <- simResult{c: c, t: t, err: err}
				}()
				s.settle()
			}
		}
		s.settle()
		s.clock.Advance(step)
		now := s.clock.Now()
		kept := s.held[:0]
		for _, h := range s.held {
			if now.Before(h.until) {
				kept = append(kept, h)
				continue
			}
			s.inUse.Add(-1)
			h.t.Done()
			s.q.Notify()
		}
		s.held = kept
		s.settle()
	}
	_ = start
}

// rate returns c's served requests per second over the window.
func rate(c *simClient, window time.Duration) float64 { return float64(c.served) / window.Seconds() }

func TestFairMaxMinShares(t *testing.T) {
	// 10 slots of 10ms: 1000 requests a second. A asks 100, B 400, C 2000:
	// max-min gives A 100, B 400, C the 500 left.
	a := &simClient{key: "a", prio: shed.Default, rate: 100, service: 10 * time.Millisecond}
	b := &simClient{key: "b", prio: shed.Default, rate: 400, service: 10 * time.Millisecond}
	c := &simClient{key: "c", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, c, b, a)
	s.run(4*time.Second, time.Second)
	w := 3 * time.Second
	t.Logf("served/s: a %.0f (of %d offered), b %.0f (of %d), c %.0f (of %d)", rate(a, w), a.offered, rate(b, w), b.offered, rate(c, w), c.offered)
	if a.served < a.offered*999/1000 || b.served < b.offered*99/100 {
		t.Fatalf("light clients not served as they ask: a %d/%d, b %d/%d", a.served, a.offered, b.served, b.offered)
	}
	if r := rate(c, w); r < 470 || r > 520 {
		t.Fatalf("heavy client served %.0f/s, want what the others leave (about 500/s)", r)
	}
}

func TestFairUnfairQueueServesInArrivalOrder(t *testing.T) {
	// The same load through a queue that is not fair: the light client is
	// refused as often as the heavy one, which is what fairness fixes.
	a := &simClient{key: "a", prio: shed.Default, rate: 100, service: 10 * time.Millisecond}
	c := &simClient{key: "c", prio: shed.Default, rate: 5000, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{Off: true}, c, a)
	s.run(3*time.Second, time.Second)
	if a.served > a.offered*9/10 {
		t.Fatalf("without fairness the light client got %d of %d: the simulation does not overload", a.served, a.offered)
	}
}

func TestFairWeights(t *testing.T) {
	b := &simClient{key: "b", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	c := &simClient{key: "c", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	f := Fairness{Weight: func(r shed.Request) float64 {
		if r.Key == "c" {
			return 3
		}
		return 0 // counts as 1
	}}
	s := newFairSim(t, 10, f, b, c)
	s.run(4*time.Second, time.Second)
	w := 3 * time.Second
	rb, rc := rate(b, w), rate(c, w)
	t.Logf("served/s: b %.0f, c (weight 3) %.0f", rb, rc)
	if math.Abs(rc/rb-3) > 0.3 || rb+rc < 950 {
		t.Fatalf("b %.0f/s, c %.0f/s: want 1:3 of 1000/s", rb, rc)
	}
}

func TestFairCostAware(t *testing.T) {
	// A's requests hold a slot 4 times as long as B's: each gets half of
	// the slot-time, so A is granted a quarter as many requests.
	a := &simClient{key: "a", prio: shed.Default, rate: 2000, service: 40 * time.Millisecond}
	b := &simClient{key: "b", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, a, b)
	s.run(5*time.Second, 2*time.Second)
	w := 3 * time.Second
	ra, rb := rate(a, w), rate(b, w)
	slotA := ra * 0.04 // slots a holds on average
	slotB := rb * 0.01
	t.Logf("served/s: a (40ms) %.0f holding %.1f slots, b (10ms) %.0f holding %.1f", ra, slotA, rb, slotB)
	if slotA > 5.5 || slotB < 4.5 {
		t.Fatalf("a holds %.1f of 10 slots, b %.1f: want half each", slotA, slotB)
	}
}

func TestFairClientLeavesAndComesBack(t *testing.T) {
	a := &simClient{key: "a", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	var bWindow int
	b := &simClient{key: "b", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond,
		// away from 1s to 3s, back at 3s
		active: func(t time.Duration) bool { return t < time.Second || t >= 3*time.Second }}
	s := newFairSim(t, 10, Fairness{}, a, b)
	s.run(3*time.Second, 0)
	aAlone := a.served
	bWindow = b.served
	t.Logf("first 3s: a %d, b %d", aAlone, bWindow)
	if aAlone < 2000 {
		t.Fatalf("a served %d in 3s, b away for 2 of them: want most of the capacity", aAlone)
	}
	// b comes back: within the next second both get about half, b
	// neither starved nor owed a burst for the time it was away.
	a.served, b.served = 0, 0
	s.run(time.Second, 0)
	t.Logf("second after b came back: a %d, b %d", a.served, b.served)
	if b.served < 420 || a.served < 420 {
		t.Fatalf("after b came back: a %d, b %d in 1s, want about 500 each", a.served, b.served)
	}
}

func TestFairPrioritiesStayStrict(t *testing.T) {
	// Critical demand takes half the capacity; the default client gets the
	// rest, neither more nor starved.
	crit := &simClient{key: "x", prio: shed.Critical, rate: 500, service: 10 * time.Millisecond}
	def := &simClient{key: "y", prio: shed.Default, rate: 3000, service: 10 * time.Millisecond}
	light := &simClient{key: "z", prio: shed.Default, rate: 20, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, def, crit, light)
	s.run(4*time.Second, time.Second)
	w := 3 * time.Second
	t.Logf("served/s: critical %.0f of %d, default heavy %.0f, default light %.0f of %d", rate(crit, w), crit.offered, rate(def, w), rate(light, w), light.offered)
	if crit.served < crit.offered*999/1000 {
		t.Fatalf("critical served %d of %d", crit.served, crit.offered)
	}
	if light.served < light.offered*999/1000 {
		t.Fatalf("light default client served %d of %d", light.served, light.offered)
	}
	if r := rate(def, w); r < 450 {
		t.Fatalf("heavy default client served %.0f/s, want what critical leaves (about 480/s)", r)
	}
}

func TestFairManyKeysBoundedMemory(t *testing.T) {
	// A client sending a new key with every request is as many clients,
	// each asking once: the queue's memory does not grow with the keys,
	// and a light client among them is served as in a queue that is not
	// fair, in proportion to the arrivals, rather than not at all.
	light := &simClient{key: "light", prio: shed.Default, rate: 10, service: 10 * time.Millisecond}
	flood := &simClient{key: "flood", prio: shed.Default, rate: 4800, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, flood, light)
	s.mix = rand.New(rand.NewPCG(1, 2))
	s.keyOf = func(c *simClient, n int) string {
		if c == flood {
			return fmt.Sprintf("k%d", n)
		}
		return c.key
	}
	s.run(3*time.Second, time.Second)
	lv := &s.q.levels[shed.Default.Index()]
	if len(lv.flows) != FairQueues {
		t.Fatalf("%d flows, want %d whatever the keys", len(lv.flows), FairQueues)
	}
	got := float64(light.served) / float64(light.offered)
	all := float64(light.served+flood.served) / float64(light.offered+flood.offered)
	t.Logf("light served %.1f%% against %d distinct keys, all clients %.1f%% (refused: %v)", 100*got, flood.offered, 100*all, light.errs)
	// Every slot still goes to somebody.
	if r := float64(light.served+flood.served) / 2; r < 950 {
		t.Fatalf("served %.0f/s of 1000/s", r)
	}
	if n := len(s.q.levels[shed.Default.Index()].top.e); n != topSize {
		t.Fatalf("top clients hold %d entries, want %d whatever the keys", n, topSize)
	}
}

func TestFairTopClients(t *testing.T) {
	a := &simClient{key: "a", prio: shed.Default, rate: 100, service: 10 * time.Millisecond}
	c := &simClient{key: "c", prio: shed.Default, rate: 2000, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, a, c)
	s.run(2*time.Second, 0)
	top := TopClients(5, s.q)
	if len(top) != 2 || top[0].Key != "c" || top[1].Key != "a" {
		t.Fatalf("top clients %+v, want c then a", top)
	}
	if top[0].Share < 0.8 || top[0].Queued == 0 || top[0].Priority != shed.Default {
		t.Fatalf("top client %+v: want about 0.9 of the service, requests queued", top[0])
	}
	n, share := s.q.FlowStats(shed.Default)
	if n < 1 || share <= 0 || share > 1 {
		t.Fatalf("FlowStats: %d clients, share %v", n, share)
	}
}

// Clients even in their service are served in arrival order, as a plain
// queue serves them: fairness reorders only a client that is ahead.
func TestFairEvenClientsInArrivalOrder(t *testing.T) {
	q, err := NewFairQueue(shed.QueueConfig{MaxLength: 16, MaxWait: time.Minute}, Fairness{})
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64 // grants allowed
	take := func() bool {
		if open.Load() > 0 {
			open.Add(-1)
			return true
		}
		return false
	}
	order := make(chan string, 8)
	keys := []string{"d", "a", "c", "b", "e", "h", "g", "f"}
	for i, k := range keys {
		go func() {
			tk, _, err := q.WaitRequest(context.Background(), shed.Request{Key: k}, time.Time{}, take, func() {})
			if err != nil {
				t.Error(err)
			}
			tk.Done()
			order <- k
		}()
		for q.Len() != i+1 {
			runtime.Gosched()
		}
	}
	var got []string
	for range keys {
		open.Add(1)
		q.Notify()
		got = append(got, <-order)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("served %v, want the arrival order %v", got, keys)
	}
}

// A client with k keys counts as k clients: against one heavy client with
// one key, a client spreading the same demand over 7 keys gets 7/8 of the
// capacity.
func TestFairManyKeysCountAsManyClients(t *testing.T) {
	one := &simClient{key: "one", prio: shed.Default, rate: 3000, service: 10 * time.Millisecond}
	many := &simClient{key: "many", prio: shed.Default, rate: 3000, service: 10 * time.Millisecond}
	s := newFairSim(t, 10, Fairness{}, one, many)
	s.mix = rand.New(rand.NewPCG(3, 4))
	s.keyOf = func(c *simClient, n int) string {
		if c == many {
			return "many-" + strconv.Itoa(n%7)
		}
		return c.key
	}
	s.run(4*time.Second, time.Second)
	w := 3 * time.Second
	share := rate(many, w) / (rate(many, w) + rate(one, w))
	t.Logf("served/s: one key %.0f, seven keys %.0f: share %.3f", rate(one, w), rate(many, w), share)
	if share < 0.8 || share > 0.95 {
		t.Fatalf("the client with 7 keys got %.3f of the capacity, want about 7/8", share)
	}
}

// seedApart reseeds q, which must be empty, until keys are dealt distinct
// first cards: each then waits in a flow of its own, and no key starts
// from the virtual time another left in a flow they share. The seed is
// random, and two keys of a test share a first card once in 64 seeds:
// tests that assert an order of grants would fail by chance without it.
func seedApart(t *testing.T, q *WaitQueue, keys ...string) {
	t.Helper()
	for range 1000 {
		seen := make(map[uint64]bool, len(keys))
		for _, k := range keys {
			seen[maphash.String(q.seed, k)%FairQueues] = true
		}
		if len(seen) == len(keys) {
			return
		}
		q.seed = maphash.MakeSeed()
	}
	t.Fatalf("no seed deals %v distinct first cards", keys)
}

// oneSlot is a fair queue in front of one slot, on a manual clock: wait
// queues a request of a client, release frees the slot after 10ms and
// returns the client granted it next.
type oneSlot struct {
	t       *testing.T
	q       *WaitQueue
	clock   *shedtest.Clock
	inUse   atomic.Int64
	granted chan oneSlotGrant
	cur     oneSlotGrant
}

type oneSlotGrant struct {
	key string
	t   Ticket
}

// newOneSlot returns the queue with its slot taken.
func newOneSlot(t *testing.T) *oneSlot {
	t.Helper()
	return newOneSlotWith(t, shed.QueueConfig{MaxLength: 64, MaxWait: time.Hour})
}

// newOneSlotWith returns a queue of cfg, on a manual clock, with its slot
// taken.
func newOneSlotWith(t *testing.T, cfg shed.QueueConfig) *oneSlot {
	t.Helper()
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg.Clock = clock
	q, err := NewFairQueue(cfg, Fairness{})
	if err != nil {
		t.Fatal(err)
	}
	s := &oneSlot{t: t, q: q, clock: clock, granted: make(chan oneSlotGrant, 64)}
	if !s.take() {
		t.Fatal("the slot is taken")
	}
	return s
}

func (s *oneSlot) take() bool { return s.inUse.CompareAndSwap(0, 1) }

func (s *oneSlot) wait(key string) {
	n := s.q.Len()
	go func() {
		tk, _, err := s.q.WaitRequest(context.Background(), shed.Request{Key: key}, time.Time{}, s.take, func() { s.inUse.Store(0) })
		if err != nil {
			s.t.Error(err)
		}
		s.granted <- oneSlotGrant{key, tk}
	}()
	for s.q.Len() == n {
		runtime.Gosched()
	}
}

func (s *oneSlot) release() string {
	s.clock.Advance(10 * time.Millisecond)
	s.inUse.Store(0)
	s.cur.t.Done()
	s.q.Notify()
	s.cur = <-s.granted
	return s.cur.key
}

// grants releases the slot once per key of want and fails the test, saying
// what case it was, unless each release granted that key.
func (s *oneSlot) grants(what string, want ...string) {
	s.t.Helper()
	for _, w := range want {
		if got := s.release(); got != w {
			s.t.Fatalf("%s: %s granted, want %s (in the order %v)", what, got, w, want)
		}
	}
}

// A client that asks now and then is served at the next free slot, ahead
// of a client that keeps the queue full, whichever queued first; and that
// holds again when it comes back (its credit is bounded, not spent).
func TestFairNewcomerServedAheadOfAFlood(t *testing.T) {
	s := newOneSlot(t)
	seedApart(t, s.q, "heavy", "light-0", "light-1", "light-2")
	for range 8 {
		s.wait("heavy")
	}
	for round := range 40 {
		if got := s.release(); got != "heavy" {
			t.Fatalf("round %d: %s granted, want heavy, the only one waiting", round, got)
		}
		s.wait("heavy")
		if round < 2*fairWindow || round%5 != 0 {
			continue
		}
		light := fmt.Sprintf("light-%d", round%3) // the same three come back
		s.wait(light)
		if got := s.release(); got != light {
			t.Fatalf("round %d: %s granted, want %s, which asks now and then", round, got, light)
		}
		s.wait("heavy")
	}
}

// A client ahead of the least served by more than the window waits for it
// only while it has a backlog: its single waiter is served in arrival
// order, its second waits.
func TestFairOneWaiterIsNoBacklog(t *testing.T) {
	s := newOneSlot(t)
	seedApart(t, s.q, "ahead", "new", "other")
	// "ahead" is served alone for a while, one waiter at a time.
	getAhead := func() {
		for range 2 * fairWindow {
			s.wait("ahead")
			if got := s.release(); got != "ahead" {
				t.Fatalf("%s granted, want ahead, the only one waiting", got)
			}
		}
	}
	getAhead()
	// It queues again, then a newcomer starts a window behind it: one
	// waiter is served first come, first served.
	s.wait("ahead")
	s.wait("new")
	s.grants("one waiter ahead, in arrival order", "ahead", "new")
	// With two waiters it is a backlog: the newcomer goes first.
	getAhead()
	s.wait("ahead")
	s.wait("ahead")
	s.wait("other")
	s.grants("two waiters ahead", "other", "ahead", "ahead")
}

// While a flood holds most of the queue, the other clients are served in
// the order they came, adaptive LIFO or not: newest first is for the
// flood's standing queue. Without a flood, LIFO serves the newest first.
func TestFairFloodLeavesOthersInArrivalOrder(t *testing.T) {
	const maxWait = time.Second
	lifo := shed.QueueConfig{MaxLength: 64, MaxWait: maxWait, AdaptiveLIFO: true}
	s := newOneSlotWith(t, lifo)
	seedApart(t, s.q, "heavy", "a", "b", "c")
	for range 4 {
		s.wait("heavy")
	}
	for range 2 * fairWindow {
		if got := s.release(); got != "heavy" {
			t.Fatalf("%s granted, want heavy, the only one waiting", got)
		}
		s.wait("heavy")
	}
	// The queue has stood for more than MaxWait/2 now: LIFO is in force.
	s.clock.Advance(maxWait / 2)
	s.wait("a")
	s.wait("b")
	s.wait("c")
	s.grants("beside a flood, in arrival order", "a", "b", "c", "heavy")

	s = newOneSlotWith(t, lifo)
	seedApart(t, s.q, "a", "b", "c")
	s.wait("a")
	s.clock.Advance(maxWait/2 + time.Millisecond)
	s.wait("b")
	s.wait("c")
	s.grants("no flood, newest first", "c", "b", "a")
}

// While another client keeps the queue full, a client's only waiter that
// is next in line is not refused when MaxWait runs out: it waits once more
// as long again (the capacity went elsewhere, not to a flood of its own).
// A client ahead with one waiter is no flood.
func TestFairNextInLineWaitsOnceMore(t *testing.T) {
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	const maxWait = 100 * time.Millisecond
	q, err := NewFairQueue(shed.QueueConfig{MaxLength: 64, MaxWait: maxWait, Clock: clock}, Fairness{})
	if err != nil {
		t.Fatal(err)
	}
	seedApart(t, q, "heavy", "light", "x", "y", "z", "v")
	var inUse atomic.Int64
	take := func() bool { return inUse.CompareAndSwap(0, 1) }
	type result struct {
		key    string
		t      Ticket
		waited time.Duration
		err    error
	}
	done := make(chan result, 64)
	wait := func(key string) {
		n := q.Len()
		go func() {
			tk, waited, err := q.WaitRequest(context.Background(), shed.Request{Key: key}, time.Time{}, take, func() { inUse.Store(0) })
			done <- result{key, tk, waited, err}
		}()
		for q.Len() == n {
			runtime.Gosched()
		}
	}
	if !take() {
		t.Fatal("the slot is taken")
	}
	var cur Ticket
	// heavy has the slot time after time, well past the window.
	for range 3 * fairWindow {
		wait("heavy")
		clock.Advance(10 * time.Millisecond)
		inUse.Store(0)
		cur.Done()
		q.Notify()
		r := <-done
		if r.err != nil || r.key != "heavy" {
			t.Fatalf("%s: %v", r.key, r.err)
		}
		cur = r.t
	}
	wait("light")
	clock.Advance(maxWait / 2)
	wait("heavy") // the flood goes on, more than one waiting
	wait("heavy")
	clock.Advance(maxWait / 2)
	// Its MaxWait has run out; heavy's waiter has not.
	select {
	case r := <-done:
		t.Fatalf("%s left the queue (%v) when light's MaxWait ran out, want light extended", r.key, r.err)
	default:
	}
	clock.Advance(maxWait / 4)
	inUse.Store(0)
	cur.Done()
	q.Notify()
	r := <-done
	if r.key != "light" || r.err != nil || r.waited != 5*maxWait/4 {
		t.Fatalf("%s granted after %v (%v), want light after %v", r.key, r.waited, r.err, 5*maxWait/4)
	}
	// A lone waiter: MaxWait as it is.
	clock.Advance(maxWait / 4)
	for range 2 {
		if r := <-done; r.key != "heavy" || r.err == nil {
			t.Fatalf("%s: %v, want heavy timed out at MaxWait", r.key, r.err)
		}
	}
	// heavy, far ahead, with one waiter: no flood, MaxWait as it is.
	wait("heavy")
	wait("light")
	clock.Advance(maxWait)
	for range 2 {
		r := <-done
		if r.err == nil || r.waited != maxWait {
			t.Fatalf("%s after %v: %v, want timed out at MaxWait, no flood", r.key, r.waited, r.err)
		}
	}
	// heavy, far ahead, with two waiters among more of alike clients with
	// one each: no flood either (among many alike clients, chance puts one
	// a window ahead with two).
	wait("light")
	clock.Advance(maxWait / 4)
	for _, k := range []string{"x", "y", "z", "v", "heavy", "heavy"} {
		wait(k)
	}
	clock.Advance(3 * maxWait / 4)
	select {
	case r := <-done:
		if r.key != "light" || r.err == nil || r.waited != maxWait {
			t.Fatalf("%s after %v: %v, want light timed out at MaxWait, no flood", r.key, r.waited, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("light still waits after MaxWait, want it timed out: two waiters of one client are no flood among five alike")
	}
	// The rest time out, the last alike ones perhaps extended once (by
	// then the two hold most of the waiters).
	for n := 0; n < 6; {
		clock.Advance(maxWait)
		select {
		case <-done:
			n++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 6 left the queue", n)
		}
	}
}

// byFirstCard returns keys ordered by the flow each is dealt first, last
// flow first when desc.
func byFirstCard(q *WaitQueue, desc bool, keys ...string) []string {
	out := slices.Clone(keys)
	card := func(k string) uint64 { return maphash.String(q.seed, k) % FairQueues }
	slices.SortFunc(out, func(a, b string) int {
		if desc {
			a, b = b, a
		}
		return int(card(a)) - int(card(b))
	})
	return out
}

// At a full queue whose clients each have one waiter, the waiter given up
// is the one a plain queue would give up: the oldest while LIFO is in
// force (it would be served last), else, for a newcomer of higher
// priority, the newest. The flows' order in the queue says nothing of
// the waiters' ages: the keys queue in the order that puts the waiter to
// give up in the flow a scan of the flows meets last.
func TestFairFullQueueGivesUpTheWaiterServedLast(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	run := func(t *testing.T, lifo bool, newcomer shed.Priority, desc bool, wantErr error, wantIdx func([]string) string) {
		const maxWait = time.Second
		clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		q, err := NewFairQueue(shed.QueueConfig{MaxLength: len(keys), MaxWait: maxWait, AdaptiveLIFO: lifo, Clock: clock}, Fairness{})
		if err != nil {
			t.Fatal(err)
		}
		seedApart(t, q, append(slices.Clone(keys), "new")...)
		order := byFirstCard(q, desc, keys...)
		never := func() bool { return false }
		// The waiters left are never served: they leave with the test.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			key string
			err error
		}
		done := make(chan result, len(keys)+1)
		for i, k := range order {
			go func() {
				_, _, err := q.WaitRequest(ctx, shed.Request{Key: k, Priority: shed.Sheddable}, time.Time{}, never, func() {})
				done <- result{k, err}
			}()
			for q.Len() != i+1 {
				runtime.Gosched()
			}
		}
		// LIFO is in force once the queue has stood for MaxWait/2.
		clock.Advance(maxWait/2 + time.Millisecond)
		go func() {
			_, _, err := q.WaitRequest(ctx, shed.Request{Key: "new", Priority: newcomer}, time.Time{}, never, func() {})
			done <- result{"new", err}
		}()
		r := <-done
		if want := wantIdx(order); r.key != want || !errors.Is(r.err, wantErr) {
			t.Fatalf("queued %v: %s left (%v), want %s (%v)", order, r.key, r.err, want, wantErr)
		}
	}
	oldest := func(order []string) string { return order[0] }
	newest := func(order []string) string { return order[len(order)-1] }
	t.Run("LIFO, alike newcomer: the oldest", func(t *testing.T) {
		run(t, true, shed.Sheddable, true, ErrQueueFull, oldest)
	})
	t.Run("LIFO, higher priority: the oldest", func(t *testing.T) {
		run(t, true, shed.Critical, true, ErrEvicted, oldest)
	})
	t.Run("in arrival order, higher priority: the newest", func(t *testing.T) {
		run(t, false, shed.Critical, false, ErrEvicted, newest)
	})
}

// Under AdaptiveLIFO a full queue gives up the oldest waiter of the client
// with the most waiters for a newcomer, even one of that client, unless
// that client floods: it holds most of the priority's waiters while
// another client has queued at that priority within MaxWait. Then its
// newcomer is refused at once, and its waiters keep their places.
func TestFairLIFOFloodsNewcomerIsRefused(t *testing.T) {
	const maxWait = time.Second
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	q, err := NewFairQueue(shed.QueueConfig{MaxLength: 4, MaxWait: maxWait, AdaptiveLIFO: true, Clock: clock}, Fairness{})
	if err != nil {
		t.Fatal(err)
	}
	seedApart(t, q, "heavy", "light")
	never := func() bool { return false }
	// The waiters left are never served: they leave with the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 32)
	start := func(key, name string) {
		go func() {
			_, _, err := q.WaitRequest(ctx, shed.Request{Key: key}, time.Time{}, never, func() {})
			done <- result{name, err}
		}()
	}
	next := func() result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no waiter left the queue")
			return result{}
		}
	}
	// join queues a request of key into a queue with room.
	join := func(key, name string) {
		t.Helper()
		n := q.Len()
		start(key, name)
		for q.Len() == n {
			runtime.Gosched()
		}
	}
	// displaces says that a newcomer of key takes the place of want.
	displaces := func(key, name, want string) {
		t.Helper()
		start(key, name)
		if r := next(); r.name != want || !errors.Is(r.err, ErrQueueFull) {
			t.Fatalf("%s came: %s left (%v), want %s (ErrQueueFull)", name, r.name, r.err, want)
		}
		for q.Len() != 4 {
			runtime.Gosched()
		}
	}
	// refused says that a newcomer of key is refused, and nobody else.
	refused := func(key, why string) {
		t.Helper()
		start(key, "newcomer")
		if r := next(); r.name != "newcomer" || !errors.Is(r.err, ErrQueueFull) {
			t.Fatalf("%s: %s left (%v), want %s's newcomer refused (ErrQueueFull)", why, r.name, r.err, key)
		}
	}
	timesOut := func(names ...string) {
		t.Helper()
		for range names {
			if r := next(); !slices.Contains(names, r.name) || !errors.Is(r.err, ErrQueueTimeout) {
				t.Fatalf("%s left (%v), want one of %v timed out", r.name, r.err, names)
			}
		}
	}

	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		join("heavy", n)
	}
	clock.Advance(maxWait/2 + time.Millisecond) // LIFO is in force
	displaces("heavy", "h5", "h1")              // one client: nobody else's share is at stake
	displaces("light", "l1", "h2")              // a client with fewer waiters
	refused("heavy", "heavy floods beside light")

	// Light stops asking. Once no other client has queued for MaxWait,
	// heavy is one client again.
	clock.Advance(maxWait/2 - time.Millisecond)
	timesOut("h3", "h4")
	clock.Advance(maxWait/2 + time.Millisecond)
	timesOut("h5", "l1")
	join("heavy", "h6") // the key changed: clients shared the queue until now
	clock.Advance(maxWait * 9 / 10)
	for _, n := range []string{"h7", "h8", "h9"} {
		join("heavy", n)
	}
	refused("heavy", "light queued within MaxWait")
	clock.Advance(maxWait / 10)
	timesOut("h6")
	join("heavy", "h10")
	displaces("heavy", "h11", "h7")
	if len(done) != 0 {
		t.Fatalf("%d more waiters left the queue", len(done))
	}
}

// Making room for a newcomer grants nothing, though capacity is free: the
// newcomer's own WaitRequest grants it, with the newcomer among the
// waiters, and a client that asks now and then is then served ahead of
// the one that keeps the queue full.
func TestFairMakeRoomLeavesTheGrantToTheNewcomer(t *testing.T) {
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	q, err := NewFairQueue(shed.QueueConfig{MaxLength: 64, MaxWait: time.Hour, Clock: clock}, Fairness{})
	if err != nil {
		t.Fatal(err)
	}
	seedApart(t, q, "heavy", "light")
	var free atomic.Bool
	take := func() bool { return free.CompareAndSwap(true, false) }
	giveBack := func() { free.Store(true) }
	done := make(chan error, 16) // the heavy client's waiters' outcomes
	join := func() {
		n := q.Len()
		go func() {
			_, _, err := q.WaitRequest(context.Background(), shed.Request{Key: "heavy"}, time.Time{}, take, giveBack)
			done <- err
		}()
		for q.Len() == n {
			runtime.Gosched()
		}
		// Its join's dispatch is done once the lock is free.
		q.mu.Lock()
		q.mu.Unlock()
	}
	for range 6 {
		join()
	}
	// The heavy client is served beyond the window, and keeps six waiting.
	for range 2 * fairWindow {
		clock.Advance(10 * time.Millisecond)
		free.Store(true)
		q.Notify()
		if err := <-done; err != nil {
			t.Fatalf("the heavy client's waiter: %v, want a grant", err)
		}
		join()
	}
	// Capacity frees, and the queue is not told (a hand-off on its way).
	free.Store(true)
	if !q.MakeRoom(shed.Request{Key: "light"}) {
		t.Fatal("no room made for a newcomer behind six waiters of one client")
	}
	if !free.Load() {
		t.Fatal("making room granted the free capacity before the newcomer joined")
	}
	if err := <-done; !errors.Is(err, ErrQueueFull) {
		t.Fatalf("the heavy client's newest waiter: %v, want %v (room made)", err, ErrQueueFull)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := q.WaitRequest(ctx, shed.Request{Key: "light"}, time.Time{}, take, giveBack); err != nil {
		t.Fatalf("the newcomer: %v, want the free capacity", err)
	}
	// The heavy client's waiters leave with the test.
	for q.Len() > 0 {
		free.Store(true)
		q.Notify()
		<-done
	}
}
