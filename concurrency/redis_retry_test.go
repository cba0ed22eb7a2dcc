package concurrency

import (
	"context"
	"testing"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// go-redis re-sends a script whose reply was lost (a connection cut after
// Redis ran it). The acquire run again for the same lease must count as the
// same admission, not as a second one refused by the first: otherwise the
// caller is refused and the member holds a slot until its TTL.
func TestRedisAcquireRunTwiceIsOneAdmission(t *testing.T) {
	c := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{PerKey: 1, Limit: 1}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	ctx := context.Background()
	req := shed.Request{Key: "k"}
	e := &redisLease{owner: r, seq: 1, member: r.instance + ":retry", keys: []string{r.keyFor(req), r.overallKey()}, cost: 1}
	bounds := []int64{1, 1}
	for run := 1; run <= 2; run++ {
		res, err := r.run(ctx, e, bounds)
		if err != nil {
			t.Fatal(err)
		}
		if res[0] != 1 {
			t.Fatalf("run %d of the same acquire refused: %v", run, res)
		}
		if res[1] != 1 || res[2] != 1 {
			t.Fatalf("run %d counts %v, want 1 in each set", run, res[1:])
		}
	}
	for _, k := range e.keys {
		if n := zcard(t, c, k); n != 1 {
			t.Fatalf("%s holds %d members after one acquire run twice, want 1", k, n)
		}
	}
	// Another lease is still refused: the retry did not free a place.
	if _, err := r.Acquire(ctx, req); err == nil {
		t.Fatal("a second lease was admitted beside the first")
	}
	r.forget(e)
	if err := r.renewNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range e.keys {
		if n := zcard(t, c, k); n != 0 {
			t.Fatalf("%s holds %d members after the clean-up", k, n)
		}
	}
}

// Close removes the leases the instance still holds, so the fleet gets
// their slots at once, not after the TTL.
func TestRedisCloseRemovesHeldLeases(t *testing.T) {
	c := newClient(t)
	r, err := NewRedis(c, RedisConfig{Config: Config{Limit: 3}, Prefix: redistest.Prefix(t), ExpectedInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ls, err := r.Acquire(ctx, shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, r.overallKey()); n != 1 {
		t.Fatalf("set holds %d", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, r.overallKey()); n != 0 {
		t.Fatalf("set holds %d after Close, want 0", n)
	}
	ls.Release(shed.Completed) // harmless after Close
	if r.Held() != 0 || r.Pending() != 0 {
		t.Fatalf("held %d, pending %d after Close", r.Held(), r.Pending())
	}
}

func TestRedisReportGauges(t *testing.T) {
	c := newClient(t)
	r := mustNewRedis(t, c, RedisConfig{Config: Config{Limit: 7, Name: "cc"}, Prefix: redistest.Prefix(t), ExpectedInstances: 3})
	ls, err := r.Acquire(context.Background(), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(shed.Completed)
	got := map[string]float64{}
	r.ReportGauges(func(g layerkit.Gauge) {
		if g.Layer != "cc" {
			t.Errorf("gauge %s from layer %q", g.Name, g.Layer)
		}
		got[g.Name] = g.Value
	})
	want := map[string]float64{layerkit.GaugeInFlight: 1, layerkit.GaugeLimit: 7, layerkit.GaugeFallback: 0, layerkit.GaugeInstances: 3}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
