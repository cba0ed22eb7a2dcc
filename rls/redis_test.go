package rls

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/ratelimit"
)

// Day-long windows: the test's counts never straddle a window's end, the
// server's TIME notwithstanding (unless run at midnight UTC).
const dayRules = `
domain: day
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: pair
    rate_limits:
      - {name: small, unit: day, requests_per_unit: 2}
      - {name: large, unit: day, requests_per_unit: 5, algorithm: sliding-window}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`

func redisServer(t *testing.T, client redis.UniversalClient, prefix string) *Server {
	t.Helper()
	d, errs := ParseEnvoyConfig("day.yaml", []byte(dayRules))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// A round trip may take longer than the default 50ms on a loaded
	// machine under -race, and the local fallback would then decide: these
	// tests are of the semantics, not of a slow Redis.
	s, err := New(Config{Domains: []Domain{d}, Redis: client,
		RedisStore: ratelimit.RedisConfig{Prefix: prefix, ExpectedInstances: 1, Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisSemantics(t *testing.T) {
	redistest.Client(t) // skips, or fails under scripts/test.sh, without a server
	addr := redistest.Addr(t)
	prefix := strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Prefix(t))
	// Two instances on one Redis share the counts.
	a := redisServer(t, redisClient(t, addr), prefix)
	b := redisServer(t, redisClient(t, addr), prefix)

	codes := func(s *Server, r *pb.RateLimitResponse) (pb.RateLimitResponse_Code, uint32) {
		return r.Statuses[0].Code, r.Statuses[0].LimitRemaining
	}
	for i, s := range []*Server{a, b, a} {
		if c, rem := codes(s, ask(t, s, "day", desc("user=u1"))); c != pb.RateLimitResponse_OK || rem != uint32(2-i) {
			t.Fatalf("request %d: %v, %d remaining", i, c, rem)
		}
	}
	if c, _ := codes(b, ask(t, b, "day", desc("user=u1"))); c != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th request across instances: %v", c)
	}
	if c, rem := codes(b, ask(t, b, "day", desc("user=u2"))); c != pb.RateLimitResponse_OK || rem != 2 {
		t.Fatalf("another value: %v %d", c, rem)
	}
	r := ask(t, a, "day", desc("user=u2"))
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > 24*time.Hour || d%time.Second != 0 {
		t.Fatalf("duration_until_reset %v: want whole seconds within the day", d)
	}

	// hits_addend 0 checks: u2 has one left, and keeps it.
	check0 := func() (pb.RateLimitResponse_Code, uint32) {
		d := desc("user=u2")
		d.HitsAddend = wrapperspbUInt64(0)
		return codes(a, ask(t, a, "day", d))
	}
	for range 3 {
		if c, rem := check0(); c != pb.RateLimitResponse_OK || rem != 1 {
			t.Fatalf("check: %v %d, want OK 1", c, rem)
		}
	}

	// Several limits: the small one rejects the third; the large one's
	// unit is given back, so it has 3 left, not 2.
	for range 2 {
		ask(t, a, "day", desc("pair=p"))
	}
	r = ask(t, b, "day", desc("pair=p"))
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.Name != "small" {
		t.Fatalf("third on the pair: %v", r)
	}
	big := desc("pair=p")
	big.HitsAddend = wrapperspbUInt64(0)
	// The small limit is spent: the check reports it.
	if r := ask(t, a, "day", big); r.Statuses[0].CurrentLimit.Name != "small" || r.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("check of the pair: %v", r)
	}

	// Several descriptors, decided in parallel, each its own status.
	r = ask(t, a, "day", desc("user=u5"), desc("user=u6"), desc("pair=q"), desc("nothing"), desc("user=u5"))
	if r.OverallCode != pb.RateLimitResponse_OK || len(r.Statuses) != 5 {
		t.Fatalf("five descriptors: %v", r)
	}
	for i, w := range map[int]uint32{1: 2, 2: 1, 3: 0} {
		if got := r.Statuses[i].LimitRemaining; got != w {
			t.Errorf("descriptor %d: %d remaining, want %d", i, got, w)
		}
	}
	// u5 twice: counted twice, in either order.
	if a, b := r.Statuses[0].LimitRemaining, r.Statuses[4].LimitRemaining; a+b != 3 || a*b != 2 {
		t.Errorf("u5 twice: %d and %d remaining, want 2 and 1", a, b)
	}
	if r.Statuses[3].CurrentLimit != nil {
		t.Fatalf("no rule: %v", r.Statuses[3])
	}

	// Shadow mode: over, but OK.
	for range 3 {
		if r := ask(t, a, "day", desc("shadow=s")); r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("shadow: %v", r.OverallCode)
		}
	}
}

func TestRedisDownFallsBackWithoutError(t *testing.T) {
	s := redisServer(t, redisClient(t, "127.0.0.1:1"), "rls-test:down:")
	var got []pb.RateLimitResponse_Code
	for range 4 {
		r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "day", Descriptors: wrap(desc("user=u"))})
		if err != nil {
			t.Fatalf("Redis down: %v, want an answer", err)
		}
		got = append(got, r.OverallCode)
	}
	// ExpectedInstances 1: the local share is the whole limit.
	want := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("codes %v, want %v", got, want)
		}
	}
}

func TestRedisPipelinedCountsExactly(t *testing.T) {
	redistest.Client(t)
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	stop := redisx.Pipeline(c, 2)
	t.Cleanup(stop)
	prefix := strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Prefix(t))
	d, errs := ParseEnvoyConfig("p.yaml", []byte("domain: p\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 50}\n"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	s, err := New(Config{Domains: []Domain{d}, Redis: c, RedisStore: ratelimit.RedisConfig{Prefix: prefix, ExpectedInstances: 1, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "p", Descriptors: wrap(desc("user=same"), desc("user=other"))})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Statuses[0].Code == pb.RateLimitResponse_OK {
					ok.Add(1)
				} else {
					over.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 || over.Load() != 78 {
		t.Fatalf("%d admitted and %d over of 128, want exactly 50 and 78", ok.Load(), over.Load())
	}
	// A caller gone before its answer gets its context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller: %v", err)
	}
	// Other commands pass through unchanged.
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRedisRepeatedDescriptorInOrder: descriptors of one request that draw
// on one count are applied in the request's order, as
// envoyproxy/ratelimit's pipeline applies them, and a check among them
// takes nothing the others can see.
func TestRedisRepeatedDescriptorInOrder(t *testing.T) {
	redistest.Client(t)
	addr := redistest.Addr(t)
	prefix := strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Prefix(t))
	s := redisServer(t, redisClient(t, addr), prefix)
	check := func(kv string) *rlpb.RateLimitDescriptor {
		d := desc(kv)
		d.HitsAddend = wrapperspbUInt64(0)
		return d
	}
	remaining := func(r *pb.RateLimitResponse) []uint32 {
		var out []uint32
		for _, st := range r.Statuses {
			out = append(out, st.LimitRemaining)
		}
		return out
	}
	// Decided in parallel, these came out in either order often enough
	// that 30 rounds of each always caught it.
	for i := range 30 {
		v := strconv.Itoa(i)
		for _, c := range []struct {
			ds   []*rlpb.RateLimitDescriptor
			want []uint32
		}{
			{wrap(check("user=c"+v), desc("user=c"+v)), []uint32{3, 2}},
			{wrap(desc("user=t"+v), desc("user=t"+v), desc("user=t"+v)), []uint32{2, 1, 0}},
			{wrap(check("user=k"+v), check("user=k"+v)), []uint32{3, 3}},
			{wrap(desc("user=m"+v), check("user=m"+v), desc("user=other"+v), desc("user=m"+v)), []uint32{2, 2, 2, 1}},
		} {
			if got := remaining(ask(t, s, "day", c.ds...)); !slices.Equal(got, c.want) {
				t.Fatalf("round %d, %v: limit_remaining %v, want %v", i, c.ds, got, c.want)
			}
		}
	}
}
