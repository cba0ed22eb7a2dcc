package config

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

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
	_, section, found := strings.Cut(string(data), "## Configuration")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	if !found || m == nil {
		t.Fatal("README has no Configuration section with a yaml block")
	}
	if _, err := Parse("README.md", []byte(m[1]), Options{}); err != nil {
		t.Error(err)
	}
}
