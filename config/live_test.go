package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func writeFile(t testing.TB, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t testing.TB, src string, opts Options) (*Live, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loadshed.yaml")
	writeFile(t, path, src)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

const twoRules = `
layers:
  - ratelimit:
      descriptors:
        - key: key
          name: per-key
          rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed-window}
        - key: route
          name: per-route
          rate_limit: {unit: minute, requests_per_unit: %d, algorithm: fixed-window}
`

func TestReloadKeepsTheCountsOfUnchangedRules(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	var reloads []Reload
	l, path := open(t, fmt.Sprintf(twoRules, 100), Options{Clock: clock, OnReload: func(r Reload) { reloads = append(reloads, r) }})
	ctx := context.Background()
	a := shed.Request{Key: "a", Route: "GET /x"}
	b := shed.Request{Key: "b", Route: "GET /x"}
	for i := 0; i < 3; i++ {
		if err := l.Do(ctx, a, ok); err != nil {
			t.Fatal(err)
		}
	}
	// per-key unchanged, per-route now 4 a minute.
	writeFile(t, path, fmt.Sprintf(twoRules, 4))
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if len(reloads) != 1 || !reloads[0].Applied || reloads[0].Kept != 1 || reloads[0].Made != 2 {
		t.Errorf("reloads %+v, want one applied, 1 part kept (per-key's limiter), 2 made (per-route's, the layer)", reloads)
	}
	// Key a had 3 of its 5: two more, then the per-key rule says no.
	for i := 0; i < 2; i++ {
		if err := l.Do(ctx, a, ok); err != nil {
			t.Fatalf("a's request %d after the reload: %v", 4+i, err)
		}
	}
	if rej := shedtest.Rejection(t, l.Do(ctx, a, ok)); rej.Policies[0].Policy != "per-key" {
		t.Errorf("a's 6th request rejected by %+v, want per-key", rej.Policies)
	}
	// per-route started afresh after the reload: 2 taken by a, 2 left for b.
	for i := 0; i < 2; i++ {
		if err := l.Do(ctx, b, ok); err != nil {
			t.Fatalf("b's request %d: %v (per-route did not start afresh?)", i+1, err)
		}
	}
	if rej := shedtest.Rejection(t, l.Do(ctx, b, ok)); rej.Policies[0].Policy != "per-route" {
		t.Errorf("b's 3rd request rejected by %+v, want per-route", rej.Policies)
	}
}

func TestReloadRefusesABadFileAndKeepsServing(t *testing.T) {
	var refused []Reload
	l, path := open(t, fmt.Sprintf(twoRules, 100), Options{OnReload: func(r Reload) {
		if !r.Applied {
			refused = append(refused, r)
		}
	}})
	before := l.Current()
	writeFile(t, path, "layers:\n  - ratelimit:\n      mode: strict\n      descriptors: []\n")
	err := l.Reload()
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("Reload: %v, want 2 errors", err)
	}
	if es[0].Line != 3 || es[0].Path != "layers[0].ratelimit.mode" {
		t.Errorf("first error %q, want line 3, layers[0].ratelimit.mode", es[0])
	}
	if applied, nrefused := l.Stats(); applied != 0 || nrefused != 1 || len(refused) != 1 {
		t.Errorf("stats %d applied, %d refused (hook saw %d), want 0, 1, 1", applied, nrefused, len(refused))
	}
	if l.Current() != before {
		t.Error("a refused file replaced the configuration")
	}
	if err := l.Do(context.Background(), shed.Request{Key: "a", Route: "GET /x"}, ok); err != nil {
		t.Errorf("after a refused reload: %v", err)
	}
	os.Remove(path)
	if err := l.Reload(); err == nil {
		t.Error("a missing file was not refused")
	}
}

// concurrencyLayers returns the concurrency limiters of b's chain.
func concurrencyLayers(b *Built) []*concurrency.Layer {
	var out []*concurrency.Layer
	for _, l := range b.Chain.Layers() {
		if c, ok := l.(*concurrency.Layer); ok {
			out = append(out, c)
		}
	}
	return out
}

const underLoad = `
layers:
  - ratelimit:
      descriptors:
        - key: key
          name: per-key
          rate_limit: {unit: minute, requests_per_unit: 500, algorithm: fixed-window}
        - key: route
          name: per-route
          rate_limit: {unit: minute, requests_per_unit: %d, algorithm: fixed-window}
  - concurrency:
      limit: %d
      action: queue
      queue: {max_length: 64, max_wait: 1h}
`

// TestReloadUnderLoad reloads ten times while eight workers send 800
// requests in all, each holding its slot for a moment. The per-key rule
// (500 a minute) never changes, so exactly 500 are admitted across every
// configuration; the concurrency section changes in the second half, and
// every concurrency layer ever built ends with nothing in flight, every
// replaced configuration closed.
func TestReloadUnderLoad(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	l, path := open(t, fmt.Sprintf(underLoad, 100_000, 4), Options{Clock: clock})
	gens := []*generation{l.cur.Load()}
	layers := map[*concurrency.Layer]bool{}
	for _, c := range concurrencyLayers(l.Current()) {
		layers[c] = true
	}

	const workers, each = 8, 100
	var admitted, rejected, running, maxRunning atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < each; i++ {
				err := l.Do(context.Background(), shed.Request{Key: "k", Route: "GET /x"}, func(context.Context) error {
					n := running.Add(1)
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					admitted.Add(1)
					runtime.Gosched()
					running.Add(-1)
					return nil
				})
				if err != nil {
					var rej *shed.Rejection
					if !errors.As(err, &rej) {
						t.Errorf("not a rejection: %v", err)
						return
					}
					rejected.Add(1)
				}
			}
		}()
	}
	close(start)
	const reloads = 10
	for i := 1; i <= reloads; i++ {
		limit := 4
		if i > reloads/2 {
			limit = 3 + i%2 // the concurrency layer changes from here on
		}
		writeFile(t, path, fmt.Sprintf(underLoad, 100_000+i, limit))
		if err := l.Reload(); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, l.cur.Load())
		for _, c := range concurrencyLayers(l.Current()) {
			layers[c] = true
		}
		runtime.Gosched()
	}
	wg.Wait()

	if got := admitted.Load() + rejected.Load(); got != workers*each {
		t.Errorf("%d requests answered, %d sent", got, workers*each)
	}
	if got := admitted.Load(); got != 500 {
		t.Errorf("%d admitted, want exactly 500: the per-key rule's count did not survive the reloads", got)
	}
	if m := maxRunning.Load(); m > 8 {
		t.Errorf("%d ran at once, more than the workers", m)
	}
	if n := len(layers); n != 6 {
		t.Errorf("%d concurrency layers built, want 6 (one kept for 5 reloads, then a new one at each)", n)
	}
	for c := range layers {
		if n := c.InFlight(); n != 0 {
			t.Errorf("a concurrency layer (limit %d) has %d in flight after every request ended", c.Limit(), n)
		}
		if n := c.Queued(); n != 0 {
			t.Errorf("a concurrency layer has %d queued after every request ended", n)
		}
	}
	for i, g := range gens[:len(gens)-1] {
		if !g.done.Load() || g.active.Load() != 0 {
			t.Errorf("configuration %d: closed %v, %d requests inside, want closed and empty", i+1, g.done.Load(), g.active.Load())
		}
	}
	if applied, refused := l.Stats(); applied != reloads || refused != 0 {
		t.Errorf("stats %d applied, %d refused, want %d, 0", applied, refused, reloads)
	}
	t.Logf("%d admitted, %d rejected, at most %d at once, across %d reloads; %d concurrency layers built",
		admitted.Load(), rejected.Load(), maxRunning.Load(), reloads, len(layers))
}

// TestReloadKeepsInFlightCounts holds requests inside the chain across a
// reload that leaves the concurrency section alone: the new configuration
// sees them, and admits no more than the limit.
func TestReloadKeepsInFlightCounts(t *testing.T) {
	l, path := open(t, fmt.Sprintf(underLoad, 100, 2), Options{})
	release := make(chan struct{})
	inside := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Do(context.Background(), shed.Request{Key: "k"}, func(context.Context) error {
				inside <- struct{}{}
				<-release
				return nil
			})
		}()
	}
	<-inside
	<-inside
	writeFile(t, path, fmt.Sprintf(underLoad, 200, 2))
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	c := concurrencyLayers(l.Current())[0]
	if n := c.InFlight(); n != 2 {
		t.Errorf("the new configuration's layer sees %d in flight, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := l.Do(ctx, shed.Request{Key: "k"}, ok); err == nil {
		t.Error("a third request ran while two held a limit of 2")
	}
	close(release)
	wg.Wait()
	if n := c.InFlight(); n != 0 {
		t.Errorf("%d in flight after both ended", n)
	}
}
