package fleet

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

func tallyWith(stripes int, budget [shed.NumPriorities]int64) *tally {
	t := newTally(stripes)
	t.setBudget(&budget)
	return t
}

// take1 takes one unit at priority index i on stripe k and reports whether
// it was admitted, giving it back when not.
func take1(t *tally, k, i int) bool {
	st := &t.stripes[k]
	st.n[i].Add(1)
	if t.admit(st, i) {
		return true
	}
	st.put(i, 1)
	return false
}

// Credit spread over every stripe does not cost admissions: the instance
// admits exactly its budget whichever stripes the requests land on, and a
// unit released on one stripe can be taken on another.
func TestTallyExactAcrossStripes(t *testing.T) {
	tl := tallyWith(4, [4]int64{8, 8, 8, 8})
	admitted := 0
	for j := 0; j < 20; j++ {
		if take1(tl, j%4, shed.Critical.Index()) {
			admitted++
		}
	}
	if admitted != 8 {
		t.Fatalf("admitted %d over 4 stripes, want exactly the budget of 8", admitted)
	}
	// Stripe 0 holds 2; release them, and stripe 3 gets their room.
	tl.stripes[0].put(shed.Critical.Index(), 1)
	tl.stripes[0].put(shed.Critical.Index(), 1)
	first, second := take1(tl, 3, shed.Critical.Index()), take1(tl, 3, shed.Critical.Index())
	if !first || !second {
		t.Fatal("room released on stripe 0 was not available on stripe 3")
	}
	for k := range 4 {
		if take1(tl, k, shed.Critical.Index()) {
			t.Fatalf("stripe %d admitted a 9th unit under a budget of 8", k)
		}
	}
	if n := tl.load(); n[shed.Critical.Index()] != 8 {
		t.Fatalf("tally holds %v, want 8 critical", n)
	}
}

// Nested budgets: a priority's units count against its own ceiling and
// every one above it.
func TestTallyNestedBudgets(t *testing.T) {
	tl := tallyWith(2, [4]int64{2, 4, 6, 8})
	count := func(k, i, n int) int {
		got := 0
		for range n {
			if take1(tl, k, i) {
				got++
			}
		}
		return got
	}
	if got := count(0, shed.Sheddable.Index(), 10); got != 4 {
		t.Fatalf("sheddable admitted %d, want its ceiling 4", got)
	}
	if got := count(1, shed.TestMode.Index(), 3); got != 0 {
		t.Fatalf("test-mode admitted %d with sheddable's ceiling full, want 0", got)
	}
	if got := count(1, shed.Default.Index(), 10); got != 2 {
		t.Fatalf("default admitted %d, want the 2 left under its ceiling of 6", got)
	}
	if got := count(0, shed.Critical.Index(), 10); got != 2 {
		t.Fatalf("critical admitted %d, want the 2 left of 8", got)
	}
}

// A budget that shrinks below what is held takes the stripes' credit
// back: work released is not replaced until the units held are within the
// new budget, even on a stripe that had credit for more.
func TestTallyShrinkDrains(t *testing.T) {
	c := shed.Critical.Index()
	tl := tallyWith(4, [4]int64{8, 8, 8, 8})
	for j := range 8 {
		if !take1(tl, j%4, c) {
			t.Fatalf("unit %d refused under a budget of 8", j)
		}
	}
	tl.setBudget(&[4]int64{4, 4, 4, 4})
	for held := 8; held > 3; held-- {
		tl.stripes[held%4].put(c, 1)
		if held-1 >= 4 && take1(tl, held%4, c) {
			t.Fatalf("holding %d under a budget of 4, a release on stripe %d was replaced", held-1, held%4)
		}
	}
	// 3 held now: one more fits, a second does not.
	if !take1(tl, 0, c) {
		t.Fatal("refused with 3 held under a budget of 4")
	}
	if take1(tl, 1, c) {
		t.Fatal("admitted a 5th unit under a budget of 4")
	}
	tl.setBudget(&[4]int64{6, 6, 6, 6})
	if !take1(tl, 2, c) || !take1(tl, 3, c) || take1(tl, 0, c) {
		t.Fatalf("after growing the budget to 6: tally holds %v", tl.load())
	}
}

// Many goroutines on many stripes at once never hold more than a budget,
// and give every unit back.
func TestTallyConcurrentWithinBudget(t *testing.T) {
	budget := [4]int64{3, 10, 20, 30}
	tl := tallyWith(stripesFor(max(runtime.GOMAXPROCS(0), 4)), budget)
	// What the goroutines hold, by priority: counted after a take and
	// before its put, so never more than the tally holds, and read whole
	// under mu (sums of loads one by one would count a unit released at
	// one priority and taken at the next twice).
	var mu sync.Mutex
	var held [4]int64
	var over atomic.Int64
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 3000 {
				i := r.IntN(4)
				st, ok := tl.take(i, 1)
				if !ok {
					st.put(i, 1)
					continue
				}
				admitted.Add(1)
				mu.Lock()
				held[i]++
				var sum int64
				for q := range 4 {
					sum += held[q]
					if q >= i && sum > budget[q] {
						over.Add(1)
					}
				}
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				held[i]--
				mu.Unlock()
				st.put(i, 1)
			}
		}()
	}
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Fatalf("%d admissions saw the units held above a budget", n)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if n := tl.load(); n != [4]int64{} {
		t.Fatalf("units left after every release: %v", n)
	}
}

func TestStripesFor(t *testing.T) {
	for _, c := range []struct{ procs, want int }{{1, 1}, {2, 4}, {3, 8}, {4, 8}, {32, 64}, {100, 64}} {
		if got := stripesFor(c.procs); got != c.want {
			t.Errorf("stripesFor(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}
