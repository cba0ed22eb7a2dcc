package config

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
)

const redisFile = `
redis:
  addr: %s
  timeout: 500ms
layers:
  - ratelimit:
      store: redis
      prefix: "%srl:"
      descriptors:
        - key: key
          rate_limit: {unit: minute, requests_per_unit: %d, algorithm: fixed-window}
  - concurrency:
      store: redis
      prefix: "%sconc"
      limit: 1
`

// TestRedisStoresAreShared builds one file twice, as two instances would,
// and sees them share the rate count and the in-flight count through the
// real Redis.
func TestRedisStoresAreShared(t *testing.T) {
	redistest.Client(t) // skips, or fails under scripts/test.sh, without a server
	prefix := redistest.Prefix(t)
	src := fmt.Sprintf(redisFile, redistest.Addr(t), prefix, 3, prefix)
	a := mustBuild(t, src, Options{})
	b := mustBuild(t, src, Options{})
	ctx := context.Background()
	req := shed.Request{Key: "alice"}
	for i, inst := range []*Built{a, b, a} {
		if err := inst.Chain.Do(ctx, req, ok); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	if err := b.Chain.Do(ctx, req, ok); err == nil {
		t.Error("a 4th request in the minute was admitted: the instances do not share the rate count")
	}

	// One in flight fleet-wide: while a holds it, b is refused.
	bob := shed.Request{Key: "bob"}
	var g shed.Grant
	if err := a.Chain.Acquire(ctx, bob, &g); err != nil {
		t.Fatal(err)
	}
	if err := b.Chain.Do(ctx, bob, ok); err == nil {
		t.Error("b admitted a request while a held the fleet's only slot")
	}
	g.Release(shed.Completed)
	if err := b.Chain.Do(ctx, bob, ok); err != nil {
		t.Errorf("after a released its slot: %v", err)
	}
}

// TestCloseLeavesTheFleet closes a build whose fleet layer uses the file's
// Redis client: the layers close before the client, so the fleet layer can
// still leave the fleet.
func TestCloseLeavesTheFleet(t *testing.T) {
	redistest.Client(t)
	b := mustBuild(t, fmt.Sprintf(`
redis:
  addr: %s
  timeout: 500ms
layers:
  - fleet:
      capacity: 10
      prefix: "%sfleet:"
`, redistest.Addr(t), redistest.Prefix(t)), Options{})
	if err := b.Chain.Do(context.Background(), shed.Request{Key: "alice"}, ok); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("closing a build with a fleet layer: %v", err)
	}
}

func TestReloadKeepsTheRedisClient(t *testing.T) {
	redistest.Client(t)
	prefix := redistest.Prefix(t)
	var last Reload
	l, path := open(t, fmt.Sprintf(redisFile, redistest.Addr(t), prefix, 3, prefix), Options{OnReload: func(r Reload) { last = r }})
	writeFile(t, path, fmt.Sprintf(redisFile, redistest.Addr(t), prefix, 4, prefix))
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	// Kept: the client and the concurrency layer; made: the changed rule's
	// limiter and the rate-limit layer.
	if last.Kept != 2 || last.Made != 2 {
		t.Errorf("reload kept %d, made %d; want 2, 2", last.Kept, last.Made)
	}
	if err := l.Do(context.Background(), shed.Request{Key: "k"}, ok); err != nil {
		t.Errorf("after the reload: %v", err)
	}
}

// TestREADMEConfigurationParses keeps the README's example file valid.
func TestREADMEConfigurationParses(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(data), "## The config file")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	if !found || m == nil {
		t.Fatal("README has no config file section with a yaml block")
	}
	if _, err := Parse("README.md", []byte(m[1]), Options{}); err != nil {
		t.Error(err)
	}
}

const fleetFile = `
redis:
  addr: %s
layers:
  - fleet:
      prefix: "%sfleet:"
      instance: %s
      capacity: 2
      ceilings: {default: 1, sheddable: 1, test-mode: 1}
      interval: 100ms
      timeout: 100ms
  - worker:
      cpu: {disable: true}
      retry_after: %s
`

// TestFleetSectionSharesCapacity builds the fleet section for two
// instances on the real Redis, with a capacity of 2: each may admit one
// request (its allowance is its own count plus half the room left), and
// once one has a request in flight and a tick has published it, the other
// may not (half of one unit of room is none). A reload that changes only
// the worker section keeps the fleet layer. The ticks have 100ms, not the
// default half interval: the test is not about a slow Redis.
func TestFleetSectionSharesCapacity(t *testing.T) {
	redistest.Client(t)
	prefix := redistest.Prefix(t)
	addr := redistest.Addr(t)
	a, path := open(t, fmt.Sprintf(fleetFile, addr, prefix, "a", "1s"), Options{})
	b := mustBuild(t, fmt.Sprintf(fleetFile, addr, prefix, "b", "1s"), Options{})
	ctx := context.Background()
	if err := b.Chain.Do(ctx, shed.Request{Key: "k"}, ok); err != nil {
		t.Fatalf("instance b, with nothing in flight anywhere: %v", err)
	}
	var g shed.Grant
	if err := a.Current().Chain.Acquire(ctx, shed.Request{Key: "k"}, &g); err != nil {
		t.Fatal(err)
	}
	defer g.Release(shed.Completed)
	deadline := time.Now().Add(5 * time.Second)
	for b.Chain.Do(ctx, shed.Request{Key: "k"}, ok) == nil {
		if time.Now().After(deadline) {
			t.Fatal("instance b never saw a's request in flight: the capacity is not shared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fleetLayer := a.Current().Chain.Layers()[0]
	writeFile(t, path, fmt.Sprintf(fleetFile, addr, prefix, "a", "2s"))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.Current().Chain.Layers()[0] != fleetLayer {
		t.Error("a reload that left the fleet section alone built a new fleet layer")
	}
}

// A single node's client sends concurrent scripts in batches: each
// decision still runs exactly once and gets its own answer.
func TestRedisSingleNodeCountsConcurrentDecisionsExactly(t *testing.T) {
	redistest.Client(t) // skips, or fails under scripts/test.sh, without a server
	prefix := redistest.Prefix(t)
	const limit, goroutines, each = 50, 32, 4
	b := mustBuild(t, fmt.Sprintf(`
redis:
  addr: %s
  timeout: 5s
layers:
  - ratelimit:
      store: redis
      prefix: "%srl:"
      descriptors:
        - key: key
          rate_limit: {unit: day, requests_per_unit: %d, algorithm: fixed-window}
`, redistest.Addr(t), prefix, limit), Options{})
	var admitted, rejected atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := b.Chain.Do(context.Background(), shed.Request{Key: "same"}, ok); err != nil {
					rejected.Add(1)
				} else {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != limit || rejected.Load() != goroutines*each-limit {
		t.Fatalf("%d admitted and %d rejected of %d, want exactly %d admitted", admitted.Load(), rejected.Load(), goroutines*each, limit)
	}
}
