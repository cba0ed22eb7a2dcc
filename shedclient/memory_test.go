package shedclient_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedclient/internal/instantclock"
)

// roundTripFunc answers without a network.
type roundTripFunc func(*http.Request) *http.Response

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r), nil }

// TestSeveralFieldLinesAreOneList: a spent policy on the first of two
// RateLimit lines is honoured, and a policy a scope was told of on the
// first of two RateLimit-Policy lines holds it back once another scope
// learns it is spent.
func TestSeveralFieldLinesAreOneList(t *testing.T) {
	var sent atomic.Int64
	base := roundTripFunc(func(r *http.Request) *http.Response {
		sent.Add(1)
		h := http.Header{}
		code := http.StatusOK
		switch r.URL.Path {
		case "/lines":
			h["Ratelimit"] = []string{`"spent";r=0;t=30`, `"other";r=5;t=30`}
		case "/listed":
			h["Ratelimit-Policy"] = []string{`"shared";q=10;w=60`, `"own";q=10;w=60`}
		case "/spender":
			h["Ratelimit"] = []string{`"shared";r=0;t=20`}
			code = http.StatusTooManyRequests
		}
		return &http.Response{StatusCode: code, Header: h, Body: http.NoBody, Request: r}
	})
	clock := instantclock.New()
	rt := shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1, RetryBudget: -1,
		HTTPScope: func(r *http.Request) string { return r.URL.Path }}).Transport(base)
	do := func(path string) error {
		req, _ := http.NewRequest("GET", "http://svc.test"+path, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var qe *shedclient.QuotaError
	if err := do("/lines"); err != nil {
		t.Fatal(err)
	}
	if err := do("/lines"); !errors.As(err, &qe) || qe.Policy != "spent" || qe.RetryAfter != 30*time.Second {
		t.Fatalf("after a spent policy on the first of two lines: %v, want its QuotaError", err)
	}
	for _, p := range []string{"/listed", "/spender"} {
		if err := do(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := do("/listed"); !errors.As(err, &qe) || qe.Policy != "shared" || qe.RetryAfter != 20*time.Second {
		t.Fatalf("a scope told of a policy on the first of two lines, once it is spent: %v, want its QuotaError", err)
	}
	if n := sent.Load(); n != 3 {
		t.Fatalf("%d requests sent, want 3", n)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryBoundedOverall: a server answering every request of 100
// destinations × 1,000 scopes with a spent quota of its own partition
// key, each about 1 KiB, grows the client to its bound and no further;
// what it keeps is what it used last.
func TestMemoryBoundedOverall(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 100,000 requests")
	}
	const dests, scopes = 100, 1000
	filler := strings.Repeat("k", 760) // base64: about 1 KiB
	var sent atomic.Int64
	base := roundTripFunc(func(r *http.Request) *http.Response {
		sent.Add(1)
		pk := base64.StdEncoding.EncodeToString([]byte(r.URL.Host + r.URL.Path + filler))
		h := http.Header{"Ratelimit": {`"q";r=0;t=600;pk=:` + pk + `:`}}
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody, Request: r}
	})
	clock := instantclock.New()
	c := shedclient.New(shedclient.Config{Clock: clock, NoWait: true, K: -1, RetryBudget: -1,
		HTTPScope: func(r *http.Request) string { return r.URL.Path }})
	rt := c.Transport(base)
	do := func(d, s int) error {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", fmt.Sprintf("http://d%d.test/s%d", d, s), nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	before := heapInUse()
	start := time.Now()
	for d := range dests {
		for s := range scopes {
			if err := do(d, s); err != nil {
				t.Fatalf("d%d/s%d: %v", d, s, err)
			}
		}
	}
	elapsed := time.Since(start)
	held := int64(heapInUse()) - int64(before)
	const bound = shedclient.DefaultMaxMemory
	t.Logf("%d destinations × %d scopes, each a spent ~1 KiB partition: the client holds %.2f MiB (bound %.0f MiB), %v for the %d answers",
		dests, scopes, float64(held)/(1<<20), float64(bound)/(1<<20), elapsed.Round(time.Millisecond), dests*scopes)
	if held > bound+bound/8 {
		t.Errorf("the client holds %d bytes, past its bound of %d", held, bound)
	}
	// What was used last is remembered: its request is held back...
	var qe *shedclient.QuotaError
	if err := do(dests-1, scopes-1); !errors.As(err, &qe) || qe.Policy != "q" {
		t.Errorf("the last scope answered: %v, want its QuotaError", err)
	}
	// ...and what was used first is forgotten: its request is sent.
	n := sent.Load()
	if err := do(0, 0); err != nil || sent.Load() != n+1 {
		t.Errorf("the first scope answered: %v, sent %d; want it sent", err, sent.Load()-n)
	}
	runtime.KeepAlive(c)
}
