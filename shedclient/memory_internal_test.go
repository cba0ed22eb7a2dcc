package shedclient

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// check verifies that what c remembers and its list agree: every memo of
// the maps is listed once, the list holds nothing else, and the bytes
// charged add up and stay within the bound.
func (c *Client) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	onList := map[*memo]bool{}
	var sum int64
	for m := c.mem.root.next; m != &c.mem.root; m = m.next {
		if onList[m] || m.next.prev != m {
			t.Fatal("the list is broken")
		}
		onList[m] = true
		sum += m.size
	}
	if sum != c.mem.used {
		t.Fatalf("charged %d bytes, the list adds up to %d", c.mem.used, sum)
	}
	if c.mem.used > c.cfg.MaxMemory {
		t.Fatalf("charged %d bytes, past the bound of %d", c.mem.used, c.cfg.MaxMemory)
	}
	inMaps := 0
	for _, d := range c.dests {
		inMaps++
		if !onList[&d.memo] {
			t.Fatalf("destination %s is not listed", d.name)
		}
		for _, sc := range d.scopes {
			inMaps++
			if !onList[&sc.memo] || sc.d != d || sc.bytes() != sc.size {
				t.Fatalf("scope %q of %s: listed %v, charged %d for %d", sc.key, d.name, onList[&sc.memo], sc.size, sc.bytes())
			}
		}
		for _, sp := range d.spent {
			inMaps++
			if !onList[&sp.memo] || sp.d != d {
				t.Fatalf("spent policy of %s is not listed", d.name)
			}
		}
	}
	if inMaps != len(onList) {
		t.Fatalf("%d memos in the maps, %d on the list", inMaps, len(onList))
	}
}

// TestMemoryUnderConcurrentUse: with a bound small enough that every
// answer forgets something, destinations included, concurrent callers
// keep the maps, the list and the bytes charged in agreement.
func TestMemoryUnderConcurrentUse(t *testing.T) {
	c := New(Config{MaxMemory: 32 << 10, K: -1, RetryBudget: -1, NoWait: true})
	pk := strings.Repeat("p", 300)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				d := c.dest(fmt.Sprintf("d%d", (g*7+i)%13))
				a := answer{rejected: true, quota: true, limits: []limitItem{
					{id: policyID("q", fmt.Sprint(pk, i%50)), r: 0, t: 60, hasR: true, hasT: true},
					{id: "shared", r: int64(i % 2), t: 60, hasR: true, hasT: true},
				}}
				_ = c.run(context.Background(), call{dest: d, scope: fmt.Sprint("s", i%17), send: func(context.Context, int) answer { return a }})
			}
		}()
	}
	wg.Wait()
	c.check(t)
}

// TestForgetsLeastRecentlyUsed: the scope used last survives the bound;
// a scope not used since is forgotten first, and its destination only
// once it has no scope left.
func TestForgetsLeastRecentlyUsed(t *testing.T) {
	c := New(Config{K: -1, RetryBudget: -1, NoWait: true})
	spend := func(d *dest, scope string) {
		a := answer{limits: []limitItem{{id: "q\x00" + scope + strings.Repeat("k", 1000), t: 60, hasR: true, hasT: true}}}
		c.learn(d, scope, &a, c.clock.Now())
	}
	old, busy := c.dest("old.test"), c.dest("busy.test")
	spend(old, "a")
	spend(busy, "b")
	c.mu.Lock()
	perScope := c.mem.used
	c.mu.Unlock()
	c.cfg.MaxMemory = perScope + 4<<10 // room for about two more scopes
	for i := range 10 {
		spend(busy, fmt.Sprint("new", i))
		// "b" is used on every round; "a" never again.
		if _, until := c.spent(busy, "b", c.clock.Now()); until.IsZero() {
			t.Fatalf("round %d: the scope used on every round was forgotten", i)
		}
	}
	c.check(t)
	if _, until := c.spent(old, "a", c.clock.Now()); !until.IsZero() {
		t.Fatal("the scope used least recently is still remembered")
	}
	c.mu.Lock()
	_, oldListed := c.dests["old.test"]
	c.mu.Unlock()
	if oldListed {
		t.Fatal("a destination with no scope left, used least recently, is still remembered")
	}
	if _, until := c.spent(busy, "new9", c.clock.Now()); until.IsZero() {
		t.Fatal("the scope learnt last was forgotten")
	}
}
