package fleet

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/loadshed/loadshed/shed"
)

// tally is this instance's units in flight by priority, and the allowance
// the request path judges them against, split into stripes so that cores
// admitting at once do not all write one cache line.
//
// Each stripe counts the units admitted on it and holds a credit per
// ceiling r: the most units at priorities ≤ r it may hold without asking.
// An admission adds its units to its P's stripe and is done if the stripe
// stays within its credits (its own cache line, no lock). If the units
// held are over the budget already, it is refused, still without the lock.
// Otherwise the slow path takes the lock and judges the whole instance: it
// admits when, for every ceiling from the request's priority up, the sum
// over stripes of max(credit, units held) stays within the budget (the
// view's allowance), taking back unused credit first if it must; then it
// hands the stripe its units plus a share of what is left as new credit.
//
// Because credit is only handed out from what the budget leaves, and a
// stripe admits on its own only within its credit, the instance's units at
// priorities ≤ r never exceed budget[r] by way of this path: the same
// decision a single counter would make, minus the contention. A budget that
// shrinks below what is held zeroes the credits, so every admission takes
// the slow path until enough units are released.
type tally struct {
	stripes []stripe
	// homes hands out stripes: sync.Pool keeps one per P, so an admission
	// mostly writes the stripe its core wrote last.
	homes sync.Pool
	next  atomic.Uint32

	mu sync.Mutex // serialises every write of a credit, and of budget
	// budget is the allowance by ceiling; atomics so that a refusal can
	// read it without the lock.
	budget [shed.NumPriorities]atomic.Int64
}

// stripe is one share of the tally, on cache lines of its own.
type stripe struct {
	n      [shed.NumPriorities]atomic.Int64 // units held, by Priority.Index
	credit [shed.NumPriorities]atomic.Int64 // the most units at priorities ≤ r
	_      [64]byte
}

// maxBudget keeps sums of budgets and credits over every stripe within
// int64 (ceilings may be math.MaxInt64).
const maxBudget = 1 << 56

// stripesFor is how many stripes a process with GOMAXPROCS p uses: one
// when nothing runs in parallel; else more than cores, so that a stripe
// handed to a new P is rarely one another P writes. Each costs 128 bytes.
func stripesFor(p int) int {
	if p <= 1 {
		return 1
	}
	return min(1<<bits.Len(uint(2*p-1)), 64)
}

func newTally(n int) *tally {
	t := &tally{stripes: make([]stripe, n)}
	t.homes.New = func() any { return &t.stripes[int(t.next.Add(1))%len(t.stripes)] }
	return t
}

// usage is the units stripe st holds at priorities ≤ r.
func (st *stripe) usage(r int) int64 {
	var sum int64
	for q := 0; q <= r; q++ {
		sum += st.n[q].Load()
	}
	return sum
}

// fits reports whether st's units, from priority i upwards, stay within
// its credits.
func (st *stripe) fits(i int) bool {
	var sum int64
	for q := 0; q < i; q++ {
		sum += st.n[q].Load()
	}
	for r := i; r < shed.NumPriorities; r++ {
		sum += st.n[r].Load()
		// A slow path may lower the credit meanwhile, to the units it read
		// before these were added: they passed against the old credit, and
		// the slow path's max(credit, units held) still counts them.
		if sum > st.credit[r].Load() {
			return false
		}
	}
	return true
}

// take adds cost units at priority index i and reports the stripe they are
// on and whether every budget from i upwards holds them. The units stay
// added either way: a caller that does not admit them gives them back with
// put.
func (t *tally) take(i int, cost int64) (*stripe, bool) {
	st := t.homes.Get().(*stripe)
	if n := st.n[i].Load(); !st.n[i].CompareAndSwap(n, n+cost) {
		// Another core wrote this stripe meanwhile: a stripe that moved
		// between Ps (a goroutine moved between Get and Put) can leave two
		// Ps sharing one. This P moves on to the next stripe.
		st = &t.stripes[int(t.next.Add(1))%len(t.stripes)]
		st.n[i].Add(cost)
	}
	t.homes.Put(st)
	return st, t.admit(st, i)
}

// admit decides units just added on stripe st at priority index i.
func (t *tally) admit(st *stripe, i int) bool {
	return st.fits(i) || (!t.over(i) && t.refill(st, i))
}

// over reports whether the units held, counted over every stripe, are
// above the budget of some ceiling from i up: a refusal that needs no
// lock, since no credit can make room then. Under overload most requests
// that leave the fast path end here.
func (t *tally) over(i int) bool {
	var b [shed.NumPriorities]int64
	for r := range b {
		b[r] = t.budget[r].Load()
	}
	return !t.within(i, &b)
}

// put gives back cost units at priority index i on stripe st.
func (st *stripe) put(i int, cost int64) { st.n[i].Add(-cost) }

// refill is take's slow path: it judges the instance as a whole and, if
// the units fit, credits stripe st with them and a share of the room left.
func (t *tally) refill(st *stripe, i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var all, mine [shed.NumPriorities]int64
	for r := i; r < shed.NumPriorities; r++ {
		all[r], mine[r] = t.held(st, r)
		if all[r] > t.budget[r].Load() {
			t.reclaim(r)
			if all[r], mine[r] = t.held(st, r); all[r] > t.budget[r].Load() {
				return false
			}
		}
	}
	for r := i; r < shed.NumPriorities; r++ {
		// A share of the room, so that the next admissions on this stripe
		// stay on the fast path, small enough that every stripe can get one.
		extra := (t.budget[r].Load() - all[r]) / int64(2*len(t.stripes))
		st.credit[r].Store(mine[r] + extra)
	}
	return true
}

// held sums max(credit, units held) at priorities ≤ r over the stripes:
// what they hold and may still admit on their own. mine is st's term.
// t.mu is held, so no credit changes meanwhile; a stripe admitting within
// its credit leaves its term as it is.
func (t *tally) held(st *stripe, r int) (all, mine int64) {
	for k := range t.stripes {
		o := &t.stripes[k]
		m := max(o.credit[r].Load(), o.usage(r))
		if o == st {
			mine = m
		}
		all += m
	}
	return all, mine
}

// reclaim takes back every stripe's unused credit for ceiling r. A stripe
// admitting at the same time either sees its lower credit or has its units
// counted by the next held. t.mu is held.
func (t *tally) reclaim(r int) {
	for k := range t.stripes {
		o := &t.stripes[k]
		if u := o.usage(r); u < o.credit[r].Load() {
			o.credit[r].Store(u)
		}
	}
}

// setBudget makes b the allowance admissions are judged against. Where b
// is below what the stripes hold and may hold, it takes back their unused
// credit, and where even that is not enough, all of it, so that no stripe
// admits on its own until the units held are back within b.
func (t *tally) setBudget(b *[shed.NumPriorities]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for r := range b {
		t.budget[r].Store(min(b[r], maxBudget))
		if all, _ := t.held(nil, r); all <= t.budget[r].Load() {
			continue
		}
		t.reclaim(r)
		if all, _ := t.held(nil, r); all <= t.budget[r].Load() {
			continue
		}
		for k := range t.stripes {
			t.stripes[k].credit[r].Store(0)
		}
	}
}

// within reports whether the instance's units at priorities ≤ r stay
// within limit[r] for every r from i up, counting every stripe: the exact
// check of the paths that are not the fast one (soft and elastic limits).
func (t *tally) within(i int, limit *[shed.NumPriorities]int64) bool {
	n := t.load()
	var sum int64
	for q := 0; q < i; q++ {
		sum += n[q]
	}
	for r := i; r < shed.NumPriorities; r++ {
		sum += n[r]
		if sum > limit[r] {
			return false
		}
	}
	return true
}

// load returns the units held by Priority.Index, summed over the stripes.
func (t *tally) load() (out [shed.NumPriorities]int64) {
	for k := range t.stripes {
		for i := range out {
			out[i] += t.stripes[k].n[i].Load()
		}
	}
	return out
}
