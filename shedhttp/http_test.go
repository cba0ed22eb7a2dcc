package shedhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
)

// seen records the requests a layer saw, safe for concurrent use.
type seen struct {
	mu   sync.Mutex
	reqs []shed.Request
}

func (s *seen) add(_ context.Context, r shed.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

func (s *seen) last(t *testing.T) shed.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the layer saw no request")
	}
	return s.reqs[len(s.reqs)-1]
}

func newChain(t testing.TB, layers ...shed.Layer) *shed.Chain {
	t.Helper()
	c, err := shed.NewChain(shed.Config{Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newMW(t testing.TB, c *shed.Chain, cfg shedhttp.Config) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := shedhttp.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

var perKey = shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 99, Reset: 29500 * time.Millisecond}

func TestMiddlewareAdmitsSetsQuotaHeadersAndReleasesCompleted(t *testing.T) {
	l := shedtest.NewLayer("ratelimit")
	l.Quota = perKey
	var s seen
	l.OnAcquire = s.add
	mw := newMW(t, newChain(t, l), shedhttp.Config{})
	var inHandler http.Header
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = w.Header().Clone()
		if l.Held() != 1 {
			t.Errorf("lease not held while the handler runs: held %d", l.Held())
		}
		_, _ = io.WriteString(w, "ok")
	}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/x", nil)
	req.RemoteAddr = "192.0.2.7:5555"
	h.ServeHTTP(rec, req)

	if rec.Code != 200 || rec.Body.String() != "ok" {
		t.Fatalf("got %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if got, want := inHandler.Get("RateLimit-Policy"), `"per-key";q=100;w=60`; got != want {
		t.Errorf("RateLimit-Policy before the handler = %q, want %q", got, want)
	}
	if got, want := inHandler.Get("RateLimit"), `"per-key";r=99;t=30`; got != want {
		t.Errorf("RateLimit before the handler = %q, want %q", got, want)
	}
	if inHandler.Get("X-RateLimit-Limit") != "" {
		t.Error("legacy headers written without LegacyHeaders")
	}
	if l.Released(shed.Completed) != 1 || l.ReleasedTotal() != 1 {
		t.Errorf("released completed=%d total=%d, want 1 and 1", l.Released(shed.Completed), l.ReleasedTotal())
	}
	got := s.last(t)
	if got.Key != "192.0.2.7" || got.Priority != shed.Default || got.Cost != 1 {
		t.Errorf("request = %+v, want key 192.0.2.7, default priority, cost 1", got)
	}
}

func TestMiddlewareOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    shed.Outcome
	}{
		{"implicit 200", func(http.ResponseWriter, *http.Request) {}, shed.Completed},
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, shed.Completed},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, shed.Failed},
		{"503 after a 103", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(503)
		}, shed.Failed},
		{"200 then a late 500 call", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("x"))
			w.WriteHeader(500) // superfluous: the status is already 200
		}, shed.Completed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := shedtest.NewLayer("l")
			h := newMW(t, newChain(t, l), shedhttp.Config{})(http.HandlerFunc(tc.handler))
			req := httptest.NewRequest("GET", "/", nil)
			h.ServeHTTP(httptest.NewRecorder(), req)
			if l.Released(tc.want) != 1 || l.ReleasedTotal() != 1 {
				t.Errorf("released %v=%d total=%d, want exactly one %v", tc.want, l.Released(tc.want), l.ReleasedTotal(), tc.want)
			}
		})
	}
}

func TestMiddlewareDroppedWhenClientGoes(t *testing.T) {
	l := shedtest.NewLayer("l")
	ctx, cancel := context.WithCancel(context.Background())
	h := newMW(t, newChain(t, l), shedhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if l.Released(shed.Dropped) != 1 || l.ReleasedTotal() != 1 {
		t.Fatalf("released dropped=%d total=%d, want 1 and 1", l.Released(shed.Dropped), l.ReleasedTotal())
	}
}

func TestMiddlewarePanicReleasesFailedAndPropagates(t *testing.T) {
	l1, l2 := shedtest.NewLayer("a"), shedtest.NewLayer("b")
	h := newMW(t, newChain(t, l1, l2), shedhttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the handler's panic to propagate", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	for _, l := range []*shedtest.Layer{l1, l2} {
		if l.Released(shed.Failed) != 1 || l.ReleasedTotal() != 1 {
			t.Errorf("%s: released failed=%d total=%d, want 1 and 1", l.Name(), l.Released(shed.Failed), l.ReleasedTotal())
		}
	}
	// The middleware keeps working after a panic.
	h2 := newMW(t, newChain(t, l1), shedhttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h2.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if l1.Released(shed.Completed) != 1 {
		t.Error("a request after the panic did not complete")
	}
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func decodeProblem(t *testing.T, rec *httptest.ResponseRecorder) problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != shedhttp.ProblemContentType {
		t.Fatalf("Content-Type = %q, want %q", ct, shedhttp.ProblemContentType)
	}
	var p problem
	dec := json.NewDecoder(rec.Body)
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body is not JSON: %v", err)
	}
	return p
}

func TestMiddlewareRejection429(t *testing.T) {
	admit := shedtest.NewLayer("ratelimit")
	admit.Quota = shed.Quota{Policy: "global", Limit: 1000, Window: time.Second, Remaining: 500, Reset: time.Second}
	rej := shedtest.NewLayer("concurrency")
	rej.Reject(shed.Throttled("too many requests in flight", 1500*time.Millisecond,
		shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 0, Reset: 30 * time.Second},
		shed.Quota{Policy: `in"flight\`, Limit: 5, Remaining: 0}))
	called := false
	h := newMW(t, newChain(t, admit, rej), shedhttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/charges", nil))

	if called {
		t.Fatal("the handler ran for a rejected request")
	}
	if rec.Code != 429 {
		t.Fatalf("status %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.5s rounded up)", got)
	}
	if got, want := rec.Header().Get("RateLimit-Policy"), `"per-key";q=100;w=60, "in\"flight\\";q=5;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// t is cut to the retry time (2s): Retry-After must not point before
	// the end of the effective window.
	if got, want := rec.Header().Get("RateLimit"), `"per-key";r=0;t=2, "in\"flight\\";r=0`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if strings.Contains(rec.Header().Get("RateLimit-Policy"), "global") {
		t.Error("the admitted layer's quota leaked into the rejection's fields")
	}
	p := decodeProblem(t, rec)
	if p.Type != shedhttp.ProblemQuotaExceeded || p.Status != 429 || p.Title == "" || p.Detail != "too many requests in flight" {
		t.Errorf("problem = %+v", p)
	}
	if len(p.Violated) != 2 || p.Violated[0] != "per-key" || p.Violated[1] != `in"flight\` {
		t.Errorf("violated-policies = %q", p.Violated)
	}
	if strings.Contains(rec.Body.String(), "shed:") {
		t.Errorf("body carries the internal error text: %s", rec.Body)
	}
	if admit.Released(shed.Unused) != 1 || admit.Held() != 0 {
		t.Errorf("the earlier layer's lease was not given back: unused=%d held=%d", admit.Released(shed.Unused), admit.Held())
	}
}

func TestMiddlewareRejection503AndOddStatus(t *testing.T) {
	for _, tc := range []struct {
		rej        *shed.Rejection
		wantStatus int
		wantType   string
	}{
		{shed.Shed("shedding sheddable work", 0), 503, shedhttp.ProblemReducedCapacity},
		{&shed.Rejection{Layer: "x", Status: 0, Reason: ""}, 503, shedhttp.ProblemReducedCapacity},
		{&shed.Rejection{Layer: "x", Status: 200}, 503, shedhttp.ProblemReducedCapacity},
		{&shed.Rejection{Layer: "x", Status: 403, Reason: "<script>\x00\xff"}, 403, "about:blank"},
	} {
		l := shedtest.NewLayer("l")
		l.Reject(tc.rej)
		rec := httptest.NewRecorder()
		newMW(t, newChain(t, l), shedhttp.Config{})(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != tc.wantStatus {
			t.Errorf("%+v: status %d, want %d", tc.rej, rec.Code, tc.wantStatus)
		}
		if rec.Header().Get("Retry-After") != "" {
			t.Errorf("%+v: Retry-After set without a RetryAfter", tc.rej)
		}
		if rec.Header().Get("RateLimit") != "" {
			t.Errorf("%+v: RateLimit set without policies", tc.rej)
		}
		p := decodeProblem(t, rec)
		if p.Type != tc.wantType || p.Status != tc.wantStatus || p.Detail == "" {
			t.Errorf("%+v: problem = %+v", tc.rej, p)
		}
		if strings.ContainsAny(rec.Body.String(), "<>") {
			t.Errorf("body not escaped: %s", rec.Body)
		}
	}
}

func TestMiddlewareLegacyHeaders(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	l := shedtest.NewLayer("rl")
	l.Quota = perKey
	tight := shedtest.NewLayer("tight")
	tight.Quota = shed.Quota{Policy: "burst", Limit: 10, Window: time.Second, Remaining: 3, Reset: 400 * time.Millisecond}
	mw := newMW(t, newChain(t, l, tight), shedhttp.Config{LegacyHeaders: true, Clock: clock})
	rec := httptest.NewRecorder()
	mw(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	h := rec.Header()
	if h.Get("X-RateLimit-Limit") != "10" || h.Get("X-RateLimit-Remaining") != "3" || h.Get("X-RateLimit-Reset") != "1700000001" {
		t.Errorf("legacy headers = %q %q %q, want the tightest quota: 10 3 1700000001",
			h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
	}
	if got, want := h.Get("RateLimit"), `"per-key";r=99;t=30, "burst";r=3;t=1`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}

	l.Reject(shed.Throttled("slow down", time.Second, shed.Quota{Policy: "per-key", Limit: 100, Window: time.Minute, Remaining: 0, Reset: 5 * time.Second}))
	rec = httptest.NewRecorder()
	mw(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 429 || rec.Header().Get("X-RateLimit-Remaining") != "0" || rec.Header().Get("X-RateLimit-Reset") != "1700000001" ||
		rec.Header().Get("Retry-After") != "1" || rec.Header().Get("RateLimit") != `"per-key";r=0;t=1` {
		t.Errorf("rejection legacy headers: %d %v", rec.Code, rec.Header())
	}
}

// The legacy headers describe a rate limit: an in-flight quota (no window)
// with fewer units left must not displace the rate quota, as it did in the
// demo (X-RateLimit-Limit: 8, a Reset of now).
func TestMiddlewareLegacyHeadersPreferRateQuotas(t *testing.T) {
	clock := shedtest.NewClock(time.Unix(1_700_000_000, 0))
	rate := shedtest.NewLayer("rl")
	rate.Quota = shed.Quota{Policy: "per-key", Limit: 10, Window: time.Minute, Remaining: 9, Reset: 6 * time.Second}
	inFlight := shedtest.NewLayer("concurrency")
	inFlight.Quota = shed.Quota{Policy: "in-flight-per-key", Limit: 8, Remaining: 7}
	for _, order := range [][]shed.Layer{{rate, inFlight}, {inFlight, rate}} {
		rec := httptest.NewRecorder()
		newMW(t, newChain(t, order...), shedhttp.Config{LegacyHeaders: true, Clock: clock})(http.NotFoundHandler()).
			ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		h := rec.Header()
		if h.Get("X-RateLimit-Limit") != "10" || h.Get("X-RateLimit-Remaining") != "9" || h.Get("X-RateLimit-Reset") != "1700000006" {
			t.Errorf("layers %s, %s: legacy headers = %q %q %q, want the rate quota: 10 9 1700000006", order[0].Name(), order[1].Name(),
				h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
		}
	}
	// With only an in-flight quota, it is the one described.
	rec := httptest.NewRecorder()
	newMW(t, newChain(t, inFlight), shedhttp.Config{LegacyHeaders: true, Clock: clock})(http.NotFoundHandler()).
		ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if h := rec.Header(); h.Get("X-RateLimit-Limit") != "8" || h.Get("X-RateLimit-Remaining") != "7" {
		t.Errorf("in-flight only: legacy headers = %q %q, want 8 7", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
	}
}

func TestMiddlewareOnRejectReplacesEverything(t *testing.T) {
	l := shedtest.NewLayer("l")
	l.Reject(shed.Throttled("no", time.Minute, perKey))
	var got *shed.Rejection
	mw := newMW(t, newChain(t, l), shedhttp.Config{LegacyHeaders: true, OnReject: func(w http.ResponseWriter, r *http.Request, rej *shed.Rejection) {
		got = rej
		w.WriteHeader(http.StatusTeapot)
	}})
	rec := httptest.NewRecorder()
	mw(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got == nil || got.Layer != "l" {
		t.Fatalf("OnReject got %v", got)
	}
	if rec.Code != http.StatusTeapot || len(rec.Header()) != 0 || rec.Body.Len() != 0 {
		t.Errorf("the default response leaked past OnReject: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}

func TestMiddlewareNonRejectionError(t *testing.T) {
	l := shedtest.NewLayer("queue")
	l.Reject(context.Canceled)

	// The client went away while queued: nothing is written.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := &strictWriter{t: t, h: http.Header{}}
	newMW(t, newChain(t, l), shedhttp.Config{})(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if w.status != 0 || w.n != 0 || len(w.h) != 0 {
		t.Errorf("wrote %d, %d bytes, %v to a client that is gone", w.status, w.n, w.h)
	}

	// Still here (an internal error of a layer): a bare 503, no error text.
	l.Reject(errors.New("redis: connection pool exhausted at 10.0.0.3"))
	rec := httptest.NewRecorder()
	newMW(t, newChain(t, l), shedhttp.Config{})(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 503 || strings.Contains(rec.Body.String(), "redis") {
		t.Errorf("got %d %q, want a 503 without the internal error", rec.Code, rec.Body)
	}
	decodeProblem(t, rec)
}

// strictWriter fails the test when a status is written twice or after the
// body began.
type strictWriter struct {
	t      *testing.T
	h      http.Header
	status int
	n      int
}

func (w *strictWriter) Header() http.Header { return w.h }

func (w *strictWriter) WriteHeader(code int) {
	if w.status != 0 {
		w.t.Errorf("WriteHeader(%d) after WriteHeader(%d)", code, w.status)
	}
	w.status = code
}

func (w *strictWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	w.n += len(b)
	return len(b), nil
}

func TestMiddlewareWritesNothingAfterTheHandler(t *testing.T) {
	l := shedtest.NewLayer("l")
	l.Quota = perKey
	for _, status := range []int{200, 500} {
		w := &strictWriter{t: t, h: http.Header{}}
		newMW(t, newChain(t, l), shedhttp.Config{LegacyHeaders: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte("body"))
		})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.status != status || w.n != 4 {
			t.Errorf("got %d and %d bytes, want %d and 4", w.status, w.n, status)
		}
	}
}

func TestMiddlewareResponseControllerFlushAndHijack(t *testing.T) {
	l := shedtest.NewLayer("l")
	releases := make(chan shed.Outcome, 2)
	l.OnRelease = func(_ *shed.Lease, o shed.Outcome) { releases <- o }
	mw := newMW(t, newChain(t, l), shedhttp.Config{})
	flushed := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/stream", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the middleware: %v", err)
		}
		_, _ = io.WriteString(w, "first\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush through the middleware: %v", err)
		}
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the wrapped writer is not an http.Flusher")
		}
		<-flushed // the client read "first" before the handler returned
		_, _ = io.WriteString(w, "second\n")
	})))
	mux.Handle("/hijack", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack through the middleware: %v", err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = brw.Flush()
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(flushed)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if string(rest) != "second\n" {
		t.Errorf("rest %q", rest)
	}

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "hijacked" {
		t.Errorf("hijacked body %q", body)
	}
	// A hijacked connection is the handler's: the server does not wait for
	// it, so wait for the releases themselves.
	for i := 0; i < 2; i++ {
		select {
		case o := <-releases:
			if o != shed.Completed {
				t.Errorf("released %v, want completed", o)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a lease was never released")
		}
	}
	if l.ReleasedTotal() != 2 {
		t.Errorf("released %d leases, want 2", l.ReleasedTotal())
	}
}

func TestMiddlewareHijackUnsupported(t *testing.T) {
	l := shedtest.NewLayer("l")
	newMW(t, newChain(t, l), shedhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
			t.Error("Hijack on a ResponseRecorder succeeded")
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush on a ResponseRecorder: %v", err)
		}
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}

func TestMiddlewareConfigErrors(t *testing.T) {
	c := newChain(t, shedtest.NewLayer("l"))
	for _, tc := range []struct {
		cfg  shedhttp.Config
		want string
	}{
		{shedhttp.Config{ClientIP: shedhttp.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}}}, "Config.ClientIP.TrustedProxies[1]"},
		{shedhttp.Config{ClientIP: shedhttp.ClientIPConfig{TrustedProxies: []string{"proxy.internal"}}}, "Config.ClientIP.TrustedProxies[0]"},
		{shedhttp.Config{ClientIP: shedhttp.ClientIPConfig{Header: "X Forwarded"}}, "Config.ClientIP.Header"},
		{shedhttp.Config{Priorities: shedhttp.RoutePriorities{"v1/charges": shed.Critical}}, "Config.Priorities"},
		{shedhttp.Config{Priorities: shedhttp.RoutePriorities{"post /v1/charges": shed.Critical}}, "Config.Priorities"},
		{shedhttp.Config{Priorities: shedhttp.RoutePriorities{"/v1": shed.Priority(9)}}, "Config.Priorities"},
		{shedhttp.Config{DefaultPriority: shed.Priority(-7)}, "Config.DefaultPriority"},
		{shedhttp.Config{OnKeyError: 9}, "Config.OnKeyError"},
		{shedhttp.Config{MaxKeyLength: -1}, "Config.MaxKeyLength"},
	} {
		if _, err := shedhttp.New(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	var nilChain *shed.Chain
	if _, err := shedhttp.New(nilChain, shedhttp.Config{}); err == nil {
		t.Error("a nil chain built middleware")
	}
}

func TestParseRoutePriorities(t *testing.T) {
	rp, err := shedhttp.ParseRoutePriorities(map[string]string{"POST /v1/charges": "critical", "/v1/reports/*": "Sheddable", "/v1/test": "test-mode"})
	if err != nil {
		t.Fatal(err)
	}
	if rp["POST /v1/charges"] != shed.Critical || rp["/v1/reports/*"] != shed.Sheddable || rp["/v1/test"] != shed.TestMode {
		t.Errorf("parsed %v", rp)
	}
	if _, err := shedhttp.ParseRoutePriorities(map[string]string{"/x": "urgent"}); err == nil || !strings.Contains(err.Error(), "critical") {
		t.Errorf("unknown word: err = %v, want one listing the valid words", err)
	}
	if _, err := shedhttp.ParseRoutePriorities(map[string]string{"x": "critical"}); err == nil {
		t.Error("a pattern without '/' parsed")
	}
}

// routeRecorder is a chain whose one layer records what it saw.
func routeRecorder(t *testing.T) (*shed.Chain, *seen) {
	l := shedtest.NewLayer("rec")
	s := &seen{}
	l.OnAcquire = s.add
	return newChain(t, l), s
}

var annotations = shedhttp.RoutePriorities{
	"POST /v1/charges": shed.Critical,
	"/v1/charges/*":    shed.Default,
	"/v1/reports/*":    shed.Sheddable,
	"GET /v1/reports":  shed.TestMode, // exact beats the /* prefix
	"/admin/*":         shed.Sheddable,
	"/admin/health":    shed.Critical,
}

func ok(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }

// TestChiUseResolvesRoutesBeforeRouting mounts the shedder at the top with
// r.Use: chi has not routed yet, so the middleware finds the route itself,
// including routes of mounted sub-routers.
func TestChiUseResolvesRoutesBeforeRouting(t *testing.T) {
	c, s := routeRecorder(t)
	r := chi.NewRouter()
	r.Use(newMW(t, c, shedhttp.Config{Priorities: annotations, DefaultPriority: shed.Default}))
	r.Post("/v1/charges", ok)
	r.Get("/v1/charges/{id}", ok)
	r.Route("/v1/reports", func(r chi.Router) {
		r.Get("/", ok)
		r.Get("/{id}/rows", ok)
	})
	admin := chi.NewRouter()
	admin.Get("/health", ok)
	admin.Get("/stats", ok)
	r.Mount("/admin", admin)
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, tc := range []struct {
		method, path string
		route        string
		prio         shed.Priority
		status       int
	}{
		{"POST", "/v1/charges", "POST /v1/charges", shed.Critical, 200},
		{"GET", "/v1/charges/ch_123", "GET /v1/charges/{id}", shed.Default, 200},
		{"GET", "/v1/reports/r_1/rows", "GET /v1/reports/{id}/rows", shed.Sheddable, 200},
		{"GET", "/v1/reports/", "GET /v1/reports/", shed.Sheddable, 200},
		{"GET", "/admin/health", "GET /admin/health", shed.Critical, 200},
		{"GET", "/admin/stats", "GET /admin/stats", shed.Sheddable, 200},
		{"GET", "/nowhere", "", shed.Default, 404},
		{"DELETE", "/v1/charges", "", shed.Default, 405},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := s.last(t)
		if resp.StatusCode != tc.status || got.Route != tc.route || got.Priority != tc.prio {
			t.Errorf("%s %s: status %d route %q priority %v, want %d %q %v",
				tc.method, tc.path, resp.StatusCode, got.Route, got.Priority, tc.status, tc.route, tc.prio)
		}
	}
}

// TestChiWithPerGroup mounts shedders per route and group with r.With and
// inside a sub-router's r.Use, where chi has routed (part of) the request.
func TestChiWithPerGroup(t *testing.T) {
	c, s := routeRecorder(t)
	mw := newMW(t, c, shedhttp.Config{Priorities: annotations})
	r := chi.NewRouter()
	r.With(shedhttp.Prioritize(shed.Critical), mw).Post("/v1/refunds", ok)
	r.With(mw).Post("/v1/charges", ok)
	r.Group(func(r chi.Router) {
		r.Use(shedhttp.Prioritize(shed.Sheddable), mw)
		r.Get("/v1/events/{id}", ok)
	})
	r.Route("/v2", func(r chi.Router) {
		r.Use(mw) // runs inside the sub-router, before it routes
		r.Get("/items/{id}", ok)
	})
	r.Get("/unshed", ok)
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, tc := range []struct {
		method, path string
		route        string
		prio         shed.Priority
	}{
		{"POST", "/v1/refunds", "POST /v1/refunds", shed.Critical},
		{"POST", "/v1/charges", "POST /v1/charges", shed.Critical},
		{"GET", "/v1/events/ev_1", "GET /v1/events/{id}", shed.Sheddable},
		{"GET", "/v2/items/7", "GET /v2/items/{id}", shed.Default},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := s.last(t)
		if resp.StatusCode != 200 || got.Route != tc.route || got.Priority != tc.prio {
			t.Errorf("%s %s: status %d route %q priority %v, want 200 %q %v",
				tc.method, tc.path, resp.StatusCode, got.Route, got.Priority, tc.route, tc.prio)
		}
	}
	n := len(s.reqs)
	resp, err := http.Get(srv.URL + "/unshed")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(s.reqs) != n {
		t.Error("a route without the shedder ran through it")
	}
}

func TestMiddlewareOutsideTheRouterUsesConfiguredRoutes(t *testing.T) {
	c, s := routeRecorder(t)
	r := chi.NewRouter()
	r.Post("/v1/charges", ok)
	h := newMW(t, c, shedhttp.Config{Routes: r, Priorities: annotations})(r)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/charges", nil))
	if got := s.last(t); rec.Code != 200 || got.Route != "POST /v1/charges" || got.Priority != shed.Critical {
		t.Errorf("got %d %+v", rec.Code, got)
	}
}

func TestMiddlewareWithServeMuxPattern(t *testing.T) {
	c, s := routeRecorder(t)
	mw := newMW(t, c, shedhttp.Config{Priorities: shedhttp.RoutePriorities{"GET /files/{name}": shed.Sheddable}})
	mux := http.NewServeMux()
	mux.Handle("GET /files/{name}", mw(http.HandlerFunc(ok)))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/files/a.txt", nil))
	if got := s.last(t); got.Route != "GET /files/{name}" || got.Priority != shed.Sheddable {
		t.Errorf("got %+v", got)
	}
}

func TestMiddlewarePriorityHookAndCost(t *testing.T) {
	c, s := routeRecorder(t)
	mw := newMW(t, c, shedhttp.Config{
		Key:        shedhttp.KeyHeader("X-API-Key"),
		Priorities: annotations,
		Priority: func(r *http.Request, p shed.Priority) shed.Priority {
			if strings.HasPrefix(r.Header.Get("X-API-Key"), "sk_test_") {
				return shed.TestMode
			}
			if strings.HasPrefix(r.Header.Get("X-API-Key"), "sk_plain_") {
				return shed.Default
			}
			return p
		},
		Cost: func(r *http.Request) int64 { return 5 },
		Routes: func() chi.Routes {
			r := chi.NewRouter()
			r.Post("/v1/charges", ok)
			return r
		}(),
	})
	req := httptest.NewRequest("POST", "/v1/charges", nil)
	req.Header.Set("X-API-Key", "sk_test_abc")
	mw(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), req)
	if got := s.last(t); got.Priority != shed.TestMode || got.Cost != 5 || got.Key != "h:x-api-key:sk_test_abc" {
		t.Errorf("got %+v", got)
	}
	// The context's priority beats the route's.
	req = httptest.NewRequest("POST", "/v1/charges", nil)
	req.Header.Set("X-API-Key", "sk_live_abc")
	mw(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), req.WithContext(shed.WithPriority(req.Context(), shed.Sheddable)))
	if got := s.last(t); got.Priority != shed.Sheddable {
		t.Errorf("context priority ignored: %+v", got)
	}
	// The hook has the last word, even when it lowers a context's
	// Critical to Default: Default is not "unset".
	req = httptest.NewRequest("POST", "/v1/charges", nil)
	req.Header.Set("X-API-Key", "sk_plain_abc")
	mw(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), req.WithContext(shed.WithPriority(req.Context(), shed.Critical)))
	if got := s.last(t); got.Priority != shed.Default {
		t.Errorf("hook's Default overridden: %+v", got)
	}
}

func TestMiddlewareDeadlineFromContext(t *testing.T) {
	c, s := routeRecorder(t)
	dl := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	newMW(t, c, shedhttp.Config{})(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if got := s.last(t); !got.Deadline.Equal(dl) {
		t.Errorf("deadline %v, want %v", got.Deadline, dl)
	}
}

func TestMiddlewareKeyErrorPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy  shedhttp.KeyErrorPolicy
		wantKey string
		status  int
	}{
		{shedhttp.KeyFallbackClientIP, "198.51.100.9", 200},
		{shedhttp.KeyShared, shedhttp.AnonymousKey, 200},
		{shedhttp.KeyReject, "", 400},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c, s := routeRecorder(t)
			mw := newMW(t, c, shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key"), OnKeyError: tc.policy})
			for _, hdr := range []string{"", strings.Repeat("k", shedhttp.MaxKeyPart+1)} {
				req := httptest.NewRequest("GET", "/", nil)
				req.RemoteAddr = "198.51.100.9:4000"
				if hdr != "" {
					req.Header.Set("X-API-Key", hdr)
				}
				rec := httptest.NewRecorder()
				mw(http.HandlerFunc(ok)).ServeHTTP(rec, req)
				if rec.Code != tc.status {
					t.Fatalf("status %d, want %d", rec.Code, tc.status)
				}
				if tc.status == 400 {
					if p := decodeProblem(t, rec); p.Status != 400 {
						t.Errorf("problem %+v", p)
					}
					continue
				}
				if got := s.last(t); got.Key != tc.wantKey {
					t.Errorf("key %q, want %q", got.Key, tc.wantKey)
				}
			}
		})
	}
	// No IP at all (a Unix socket peer) still gets a key.
	c, s := routeRecorder(t)
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "@"
	newMW(t, c, shedhttp.Config{})(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), req)
	if got := s.last(t); got.Key != shedhttp.UnknownKey {
		t.Errorf("key %q, want %q", got.Key, shedhttp.UnknownKey)
	}
	// A KeyFunc returning an over-long key counts as failing.
	c, s = routeRecorder(t)
	long := func(*http.Request) (string, error) { return strings.Repeat("x", 50), nil }
	req = httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:1"
	newMW(t, c, shedhttp.Config{Key: long, MaxKeyLength: 10})(http.HandlerFunc(ok)).ServeHTTP(httptest.NewRecorder(), req)
	if got := s.last(t); got.Key != "192.0.2.1" {
		t.Errorf("key %q, want the client IP fallback", got.Key)
	}
}

// TestMiddlewareBadInput throws odd requests at the middleware in front of
// a chi router: nothing may panic and every request gets an answer.
func TestMiddlewareBadInput(t *testing.T) {
	c, _ := routeRecorder(t)
	r := chi.NewRouter()
	r.Use(newMW(t, c, shedhttp.Config{
		Key:        shedhttp.KeyCombine(shedhttp.KeyHeader("X-API-Key"), shedhttp.KeyBearer()),
		ClientIP:   shedhttp.ClientIPConfig{TrustedProxies: []string{"0.0.0.0/0", "::/0"}},
		Priorities: annotations, LegacyHeaders: true,
	}))
	r.Get("/v1/charges/{id}", ok)
	huge := strings.Repeat("A", 1<<20)
	for i, req := range []*http.Request{
		{Method: "GET", URL: mustURL("/v1/charges/x"), Header: http.Header{"X-Api-Key": {huge}, "Authorization": {"Bearer " + huge}}, RemoteAddr: "1.2.3.4:5"},
		{Method: "GET", URL: mustURL("/v1/charges/x"), Header: http.Header{"X-Forwarded-For": {huge + "," + strings.Repeat(",", 1000)}}, RemoteAddr: "[::1]:5"},
		{Method: "GET", URL: mustURL("/v1/charges/x"), Header: http.Header{"Authorization": {"Bearer", "bearer  ", "Basic abc"}}, RemoteAddr: "garbage"},
		{Method: "BREW", URL: mustURL("/v1/charges/x"), Header: http.Header{}, RemoteAddr: ""},
		{Method: "OPTIONS", URL: mustURL("*"), Header: http.Header{}, RemoteAddr: "1.2.3.4:5"},
		{Method: "GET", URL: mustURL(""), Header: http.Header{}, RemoteAddr: "1.2.3.4:5"},
		{Method: "", URL: mustURL("/%zz/\x00/../.."), Header: http.Header{"X-Api-Key": {"a|b\\c\xff"}}, RemoteAddr: "1.2.3.4"},
		{Method: "GET", URL: mustURL("/" + huge), Header: http.Header{}, RemoteAddr: "1.2.3.4:5"},
	} {
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("request %d panicked: %v", i, v)
				}
			}()
			r.ServeHTTP(rec, req.WithContext(context.Background()))
		}()
		if rec.Code == 0 {
			t.Errorf("request %d got no answer", i)
		}
	}
}

func mustURL(s string) *neturl.URL {
	u, err := neturl.Parse(s)
	if err != nil {
		return &neturl.URL{Path: s}
	}
	return u
}

// TestMiddlewareConcurrent runs many requests at once through one
// middleware, so that -race sees the recycled per-request state.
func TestMiddlewareConcurrent(t *testing.T) {
	l := shedtest.NewLayer("l")
	l.Quota = perKey
	r := chi.NewRouter()
	r.Use(newMW(t, newChain(t, l), shedhttp.Config{Priorities: annotations, LegacyHeaders: true}))
	r.Get("/v1/charges/{id}", func(w http.ResponseWriter, r *http.Request) {
		if chi.URLParam(r, "id") == "fail" {
			w.WriteHeader(500)
			return
		}
		_, _ = io.WriteString(w, chi.URLParam(r, "id"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := "ok"
				if i%5 == 0 {
					id = "fail"
				}
				resp, err := http.Get(srv.URL + "/v1/charges/" + id)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if id == "ok" && string(body) != "ok" {
					t.Errorf("body %q", body)
				}
			}
		}(g)
	}
	wg.Wait()
	srv.Close()
	if l.Released(shed.Failed) != workers*each/5 || l.Released(shed.Completed) != workers*each*4/5 || l.Held() != 0 {
		t.Errorf("failed=%d completed=%d held=%d", l.Released(shed.Failed), l.Released(shed.Completed), l.Held())
	}
}

// FuzzMiddleware sends arbitrary methods, paths, peers and headers through
// the middleware in front of a chi router: nothing may panic, every request
// is answered, and every lease is released.
func FuzzMiddleware(f *testing.F) {
	f.Add("GET", "/v1/charges/ch_1", "10.0.0.1:80", "k", "Bearer t", "1.2.3.4, 10.0.0.2", `for="[::1]:80"`)
	f.Add("POST", "/v1/reports/", "[::1]:1", "a|b\\", "bearer", ",,,", `for=`)
	f.Add("BREW", "*", "", "\xff\x00", "Basic x", "garbage", `;=;"`)
	f.Add("", "//v1/../charges/%2F", "10.9.9.9", strings.Repeat("k", 300), "Bearer "+strings.Repeat("t", 300), "::ffff:1.2.3.4", `for=unknown`)
	l := shedtest.NewLayer("l")
	l.Quota = shed.Quota{Policy: "p\"\\\xff", Limit: -5, Window: -time.Second, Remaining: 1 << 62, Reset: -1}
	c := newChain(f, l)
	r := chi.NewRouter()
	r.Use(newMW(f, c, shedhttp.Config{
		Key:           shedhttp.KeyCombine(shedhttp.KeyHeader("X-API-Key"), shedhttp.KeyBearer()),
		OnKeyError:    shedhttp.KeyShared,
		ClientIP:      shedhttp.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8", "::1"}},
		Priorities:    annotations,
		LegacyHeaders: true,
	}))
	r.Get("/v1/charges/{id}", ok)
	r.Route("/v1/reports", func(r chi.Router) { r.Get("/*", ok) })
	f.Fuzz(func(t *testing.T, method, path, remote, apiKey, auth, xff, fwd string) {
		req := &http.Request{
			Method: method, URL: &neturl.URL{Path: path}, RemoteAddr: remote,
			Header: http.Header{"X-Api-Key": {apiKey}, "Authorization": {auth}, "X-Forwarded-For": {xff}, "Forwarded": {fwd}},
		}
		req = req.WithContext(context.Background())
		rec := httptest.NewRecorder()
		before := l.ReleasedTotal()
		r.ServeHTTP(rec, req)
		if rec.Code == 0 {
			t.Fatal("no answer")
		}
		if l.Held() != 0 || l.ReleasedTotal() < before {
			t.Fatalf("leases held after the request: %d", l.Held())
		}
	})
}

func TestMiddlewareSkip(t *testing.T) {
	l := shedtest.NewLayer("l")
	l.Reject(shed.Shed("shedding", time.Second))
	h := newMW(t, newChain(t, l), shedhttp.Config{Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" }})(http.HandlerFunc(ok))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || l.Rejected() != 0 {
		t.Errorf("skipped request: %d, layer saw %d", rec.Code, l.Rejected())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1", nil))
	if rec.Code != 503 || l.Rejected() != 1 {
		t.Errorf("other request: %d, layer rejected %d", rec.Code, l.Rejected())
	}
}

// quotaLayer admits everything with the quota quota(n) on its n-th lease
// (n from 0), for tests whose quotas change from request to request.
type quotaLayer struct {
	name  string
	mu    sync.Mutex
	n     int
	quota func(n int) shed.Quota
}

func (l *quotaLayer) Name() string { return l.name }

func (l *quotaLayer) Acquire(context.Context, shed.Request) (shed.Lease, error) {
	l.mu.Lock()
	n := l.n
	l.n++
	l.mu.Unlock()
	lease := shed.NewLease(l)
	lease.Quota = l.quota(n)
	return lease, nil
}

func (l *quotaLayer) Release(*shed.Lease, shed.Outcome) {}

// TestMiddlewareQuotaFieldsPerResponse checks that each response's RateLimit
// fields are its own: two shedders on one request add a field line each, a
// handler may add its own, and neither that nor the responses that follow
// change a response already answered, even with more distinct policies than
// the middleware caches.
func TestMiddlewareQuotaFieldsPerResponse(t *testing.T) {
	outer := &quotaLayer{name: "outer", quota: func(n int) shed.Quota {
		return shed.Quota{Policy: "p" + strconv.Itoa(n), Limit: int64(100 + n), Window: time.Minute, Remaining: int64(n), Reset: time.Duration(n) * time.Second}
	}}
	inner := &quotaLayer{name: "inner", quota: func(n int) shed.Quota {
		return shed.Quota{Policy: "in-flight", Limit: 10, Remaining: int64(9 - n%10)}
	}}
	h := newMW(t, newChain(t, outer), shedhttp.Config{LegacyHeaders: true, Clock: shedtest.NewClock(time.Unix(1_700_000_000, 0))})(
		newMW(t, newChain(t, inner), shedhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("RateLimit", `"handler";r=1`)
			w.Header().Add("RateLimit-Policy", `"handler";q=2;w=1`)
			w.Header().Add("X-RateLimit-Limit", "7")
		})))
	type answer struct {
		h    http.Header
		want map[string][]string
	}
	var answers []answer
	for n := 0; n < 150; n++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		p := `"p` + strconv.Itoa(n) + `"`
		remaining := strconv.Itoa(9 - n%10)
		tightest := []string{strconv.Itoa(100 + n), strconv.Itoa(n), strconv.Itoa(1_700_000_000 + n)}
		answers = append(answers, answer{rec.Result().Header, map[string][]string{
			"Ratelimit-Policy":      {p + ";q=" + strconv.Itoa(100+n) + ";w=60", `"in-flight";q=10;qu="concurrent-requests"`, `"handler";q=2;w=1`},
			"Ratelimit":             {p + ";r=" + strconv.Itoa(n) + ";t=" + strconv.Itoa(n), `"in-flight";r=` + remaining, `"handler";r=1`},
			"X-Ratelimit-Limit":     {tightest[0], "7"},
			"X-Ratelimit-Remaining": {tightest[1]},
			"X-Ratelimit-Reset":     {tightest[2]},
		}})
	}
	for n, a := range answers {
		for k, want := range a.want {
			if got := a.h[k]; strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("response %d: %s = %q, want %q", n, k, got, want)
			}
		}
	}
}

// TestMiddlewareAdmitAllocationsWithQuota bounds what the RateLimit fields
// cost: one allocation (RateLimit's value and both field lines' slices),
// two with the legacy headers.
func TestMiddlewareAdmitAllocationsWithQuota(t *testing.T) {
	for _, tc := range []struct {
		legacy bool
		max    float64
	}{{false, 1}, {true, 2}} {
		l := shedtest.NewLayer("l")
		l.Quota = perKey
		h := newMW(t, newChain(t, l), shedhttp.Config{LegacyHeaders: tc.legacy})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.7:5555"
		hdr := http.Header{}
		w := &headerOnly{h: hdr}
		h.ServeHTTP(w, r)
		if got := hdr.Get("RateLimit"); got != `"per-key";r=99;t=30` {
			t.Fatalf("RateLimit = %q", got)
		}
		if allocs := testing.AllocsPerRun(200, func() { clear(hdr); h.ServeHTTP(w, r) }); allocs > tc.max {
			t.Errorf("legacy=%v: an admitted request with a quota allocates %v times in the middleware, want at most %v", tc.legacy, allocs, tc.max)
		}
	}
}

// headerOnly is a ResponseWriter that keeps only its header map.
type headerOnly struct{ h http.Header }

func (w *headerOnly) Header() http.Header         { return w.h }
func (w *headerOnly) WriteHeader(int)             {}
func (w *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
