package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
)

// checkFields parses every RateLimit, RateLimit-Policy and Retry-After
// value a response carries with github.com/dunglas/httpsfv, an RFC 9651
// parser independent of the one that wrote them, and checks each item
// against draft-ietf-httpapi-ratelimit-headers-10: a String naming the
// policy; q a non-negative Integer, w a positive one; r and t
// non-negative Integers; every RateLimit item named in RateLimit-Policy.
func checkFields(t testing.TB, h http.Header, what string) {
	t.Helper()
	policies := map[string]bool{}
	if vals := h.Values("RateLimit-Policy"); len(vals) > 0 {
		list, err := httpsfv.UnmarshalList(vals)
		if err != nil {
			t.Fatalf("%s: RateLimit-Policy %q: %v", what, vals, err)
		}
		for _, m := range list {
			name := checkItem(t, m, what, "RateLimit-Policy", map[string]bool{"q": true, "w": false, "qu": false, "pk": false})
			policies[name] = true
		}
	}
	if vals := h.Values("RateLimit"); len(vals) > 0 {
		list, err := httpsfv.UnmarshalList(vals)
		if err != nil {
			t.Fatalf("%s: RateLimit %q: %v", what, vals, err)
		}
		for _, m := range list {
			name := checkItem(t, m, what, "RateLimit", map[string]bool{"r": true, "t": false, "pk": false})
			if len(policies) > 0 && !policies[name] {
				t.Errorf("%s: RateLimit names %q, which RateLimit-Policy %q does not", what, name, h.Values("RateLimit-Policy"))
			}
		}
	}
	if vals := h.Values("Retry-After"); len(vals) > 0 {
		it, err := httpsfv.UnmarshalItem(vals)
		if err != nil {
			t.Fatalf("%s: Retry-After %q: %v", what, vals, err)
		}
		if n, ok := it.Value.(int64); !ok || n < 1 {
			t.Errorf("%s: Retry-After %q is not a positive number of seconds", what, vals)
		}
	}
}

// checkItem checks one list member: a String with Integer parameters,
// those marked true required, no others.
func checkItem(t testing.TB, m httpsfv.Member, what, field string, params map[string]bool) string {
	t.Helper()
	it, ok := m.(httpsfv.Item)
	if !ok {
		t.Fatalf("%s: %s member %#v is not an Item", what, field, m)
	}
	name, ok := it.Value.(string)
	if !ok || name == "" {
		t.Fatalf("%s: %s item %#v is not a non-empty String", what, field, it.Value)
	}
	for _, k := range it.Params.Names() {
		if _, known := params[k]; !known {
			t.Errorf("%s: %s item %q has unknown parameter %q", what, field, name, k)
			continue
		}
		v, _ := it.Params.Get(k)
		switch k {
		case "pk":
			if _, ok := v.([]byte); !ok {
				t.Errorf("%s: %s item %q: pk=%v is not a Byte Sequence", what, field, name, v)
			}
			continue
		case "qu":
			if _, ok := v.(string); !ok {
				if _, ok := v.(httpsfv.Token); !ok {
					t.Errorf("%s: %s item %q: qu=%v is not a String or Token", what, field, name, v)
				}
			}
			continue
		}
		n, ok := v.(int64)
		if !ok || n < 0 || (k == "w" && n < 1) {
			t.Errorf("%s: %s item %q: %s=%v is not a valid Integer", what, field, name, k, v)
		}
	}
	for k, required := range params {
		if _, ok := it.Params.Get(k); required && !ok {
			t.Errorf("%s: %s item %q lacks %s", what, field, name, k)
		}
	}
	return name
}

// TestRateLimitFieldsParse runs real layers (every rate-limit algorithm,
// a per-key in-flight cap, an overall one disclosed on purpose) through
// the middleware until they reject, and parses every field they write.
func TestRateLimitFieldsParse(t *testing.T) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyBucket,
		ratelimit.FixedWindow, ratelimit.SlidingLog, ratelimit.SlidingWindow} {
		for _, disclose := range []bool{false, true} {
			clk := shedtest.NewClock(time.Date(2026, 3, 1, 12, 0, 9, 0, time.UTC))
			store, err := ratelimit.NewMemory(alg, ratelimit.PerMinute(3), ratelimit.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			rate, err := ratelimit.New(ratelimit.Config{Clock: clk, Rules: []ratelimit.Rule{
				{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: store}}})
			if err != nil {
				t.Fatal(err)
			}
			// An overall in-flight limit only: the service's capacity,
			// shown only when disclosed.
			inFlight, err := concurrency.New(concurrency.Config{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight}})
			if err != nil {
				t.Fatal(err)
			}
			mw := shedhttp.MustNew(chain, shedhttp.Config{DiscloseCapacity: disclose, LegacyHeaders: true, Clock: clk})
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			rejected := false
			for i := 0; i < 6; i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				checkFields(t, rec.Header(), alg.String())
				if rec.Code == http.StatusTooManyRequests {
					rejected = true
				}
				if got := rec.Header().Get("RateLimit-Policy"); rec.Code == 200 && strings.Contains(got, `"in-flight"`) != disclose {
					t.Errorf("%v, disclose %v: RateLimit-Policy %q", alg, disclose, got)
				}
				clk.Advance(7 * time.Second)
			}
			if !rejected {
				t.Errorf("%v: never rejected", alg)
			}
		}
	}
}

// quotaLayer grants leases carrying the fuzzer's quota, and rejects with
// it when told to.
type quotaLayer struct {
	q      shed.Quota
	reject bool
	retry  time.Duration
}

func (l *quotaLayer) Name() string { return "fuzz" }

func (l *quotaLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	if l.reject {
		return shed.Lease{}, shed.Throttled("no", l.retry, l.q)
	}
	lease := shed.NewLease(l)
	lease.Quota = l.q
	return lease, nil
}

func (l *quotaLayer) Release(*shed.Lease, shed.Outcome) {}

// FuzzRateLimitFields writes fields for arbitrary quotas (names with any
// bytes, any numbers) and parses them back: whatever a layer reports, the
// middleware writes valid structured fields.
func FuzzRateLimitFields(f *testing.F) {
	f.Add("per-key", int64(100), int64(60e9), int64(42), int64(17e9), false, int64(3e9))
	f.Add("q\"uo\\te", int64(-1), int64(-5), int64(-7), int64(-1), true, int64(-1))
	f.Add("\x00\xffé", int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), true, int64(1<<62))
	f.Add("", int64(0), int64(0), int64(0), int64(0), false, int64(0))
	f.Fuzz(func(t *testing.T, policy string, limit, window, remaining, reset int64, reject bool, retry int64) {
		l := &quotaLayer{q: shed.Quota{Policy: policy, Limit: limit, Window: time.Duration(window),
			Remaining: remaining, Reset: time.Duration(reset)}, reject: reject, retry: time.Duration(retry)}
		chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
		if err != nil {
			t.Fatal(err)
		}
		for _, legacy := range []bool{false, true} {
			h := shedhttp.MustNew(chain, shedhttp.Config{LegacyHeaders: legacy})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			checkFields(t, rec.Header(), "fuzz")
		}
	})
}
