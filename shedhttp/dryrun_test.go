package shedhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
)

// clientFields are every response field a client may read a limit from.
var clientFields = []string{
	shedhttp.HeaderRateLimit, shedhttp.HeaderRateLimitPolicy, shedhttp.HeaderRetryAfter,
	shedhttp.HeaderXRateLimitLimit, shedhttp.HeaderXRateLimitRemaining, shedhttp.HeaderXRateLimitReset,
}

// dryRunServer is a chain of a dry-run rate layer of 1 a minute
// ("new-tighter"), a dry-run per-client in-flight limit of 1
// (in-flight-per-key), and an enforcing rate layer of 3 a minute ("per-key"),
// behind middleware with the legacy headers on.
func dryRunServer(t *testing.T, showDryRun bool) http.Handler {
	t.Helper()
	clock := shedtest.NewClock(time.Unix(1_699_999_980, 0)) // a minute's start
	store := func(n int64) *ratelimit.Memory {
		m, err := ratelimit.NewMemory(ratelimit.FixedWindow, ratelimit.Per(n, time.Minute), ratelimit.MemoryConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	layer := func(name, rule string, n int64, dry bool) shed.Layer {
		l, err := ratelimit.New(ratelimit.Config{Name: name, Clock: clock,
			Enforcement: shed.Enforcement{DryRun: dry},
			Rules:       []ratelimit.Rule{{Name: rule, Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: store(n)}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	inFlight, err := concurrency.New(concurrency.Config{Name: "dry-in-flight", PerKey: 1, KeyBy: concurrency.KeyByClient,
		Enforcement: shed.Enforcement{DryRun: true}, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{
		layer("shadow", "new-tighter", 1, true),
		inFlight,
		layer("enforcing", "per-key", 3, false),
	}})
	if err != nil {
		t.Fatal(err)
	}
	mw := shedhttp.MustNew(chain, shedhttp.Config{LegacyHeaders: true, ShowDryRun: showDryRun, Clock: clock,
		Key: func(*http.Request) (string, error) { return "client", nil }})
	return mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
}

// A limit in dry run is enforced on nobody, so no field a client reads
// (RateLimit, RateLimit-Policy, X-RateLimit-*, Retry-After, the problem
// document) may tell of it, on admitted requests (the dry-run rule is
// already over: "new-tighter";r=0) and on rejected ones; the enforcing
// rule's fields are all there.
func TestDryRunLimitsAreNotShownToClients(t *testing.T) {
	h := dryRunServer(t, false)
	for i := 1; i <= 4; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		for _, f := range clientFields {
			for _, v := range rec.Header().Values(f) {
				if strings.Contains(v, "new-tighter") || strings.Contains(v, concurrency.PolicyPerKey) {
					t.Errorf("request %d: %s: %q tells of a dry-run limit", i, f, v)
				}
			}
		}
		body, _ := io.ReadAll(rec.Body)
		if strings.Contains(string(body), "new-tighter") || strings.Contains(string(body), concurrency.PolicyPerKey) {
			t.Errorf("request %d: problem document %s tells of a dry-run limit", i, body)
		}
		remaining := 3 - i
		if i == 4 {
			remaining = 0
		}
		want := map[string]string{
			shedhttp.HeaderRateLimitPolicy:     `"per-key";q=3;w=60`,
			shedhttp.HeaderXRateLimitLimit:     "3",
			shedhttp.HeaderXRateLimitRemaining: itoa(remaining),
		}
		if i == 4 {
			if rec.Code != http.StatusTooManyRequests {
				t.Fatalf("request 4: status %d, want 429 from the enforcing rule", rec.Code)
			}
			want[shedhttp.HeaderRetryAfter] = "60"
		} else if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, rec.Code)
		}
		for f, v := range want {
			if got := rec.Header().Get(f); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, f, got, v)
			}
		}
		if got := rec.Header().Get(shedhttp.HeaderRateLimit); !strings.HasPrefix(got, `"per-key";r=`+itoa(remaining)+";") {
			t.Errorf("request %d: RateLimit = %q, want the per-key rule's only", i, got)
		}
	}
}

// Config.ShowDryRun, for testing a new limit, shows it.
func TestShowDryRunShowsDryRunLimits(t *testing.T) {
	h := dryRunServer(t, true)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got, want := rec.Header().Get(shedhttp.HeaderRateLimitPolicy), `"new-tighter";q=1;w=60, "in-flight-per-key";q=1;qu="concurrent-requests", "per-key";q=3;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
