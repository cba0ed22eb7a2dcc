package statuspage_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/statuspage"
)

// fakeWorker stands for a worker layer: it sheds, reports a shed level and a
// signal, and shares among clients.
type fakeWorker struct {
	*shedtest.Layer
	level float64
}

func (w *fakeWorker) ReportGauges(emit func(layerkit.Gauge)) {
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeUtilization, Signal: "cpu", Value: 0.93})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeShedLevel, Value: w.level})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeShedFraction, Priority: shed.Sheddable, Value: 1})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeInFlight, Value: 12})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeLimit, Value: 16})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeQueued, Value: 3})
	emit(layerkit.Gauge{Layer: w.Name(), Name: layerkit.GaugeFallback, Value: 1})
}

func (w *fakeWorker) TopClients(n int) []layerkit.ClientShare {
	return []layerkit.ClientShare{{Key: "sk_live_RAWKEY<script>", Priority: shed.Default, InFlight: 9, Share: 0.75}}
}

func newPage(t *testing.T, cfg shedstatus.Config) (*httptest.Server, *shed.Chain, *shedtest.Clock, *fakeWorker) {
	t.Helper()
	clock := shedtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	w := &fakeWorker{Layer: shedtest.NewLayer("worker"), level: 1.5}
	cfg.Layers = []shed.Layer{shedtest.NewLayer("rate"), w}
	cfg.Clock = clock
	rec, err := shedstatus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	chain, err := shed.NewChain(shed.Config{Layers: cfg.Layers, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(statuspage.New(rec, statuspage.Options{Title: "payments"}))
	t.Cleanup(srv.Close)
	return srv, chain, clock, w
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestPageShowsEveryLayer(t *testing.T) {
	srv, chain, clock, w := newPage(t, shedstatus.Config{})
	for range 3 {
		_ = chain.Do(context.Background(), shed.Request{Priority: shed.Critical}, func(context.Context) error { return nil })
	}
	w.Reject(shed.Shed("shedding sheddable work", time.Second, shed.Quota{Policy: "cpu"}))
	_ = chain.Do(context.Background(), shed.Request{Priority: shed.Sheddable, Route: "GET /v1/reports"}, nil)
	clock.Advance(time.Second)

	resp, body := get(t, srv.URL)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'sha256-") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP = %q", csp)
	}
	for _, want := range []string{
		"<title>payments status</title>", `data-layer="rate"`, `data-layer="worker"`,
		`data-figure="shed_level">1.50<`, `data-signal="cpu">93.0%<`, `data-figure="in_flight">12<`,
		`data-figure="limit">16<`, `data-figure="queued">3<`, "fallback: local estimate", "shedding sheddable work",
		"GET /v1/reports", "<polyline", "Largest clients", "75.0%", "shed fraction",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "RAWKEY") {
		t.Error("the page shows a raw key")
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page refers to another site")
	}

	_, part := get(t, srv.URL+"?part=main")
	if strings.Contains(part, "<html") || !strings.Contains(part, `data-layer="worker"`) {
		t.Errorf("main part = %.200s", part)
	}
}

func TestJSONHasTheSameFigures(t *testing.T) {
	srv, chain, clock, _ := newPage(t, shedstatus.Config{})
	_ = chain.Do(context.Background(), shed.Request{Priority: shed.Critical}, func(context.Context) error { return nil })
	clock.Advance(time.Second)
	clock.Advance(time.Second)
	resp, body := get(t, srv.URL+"?format=json")
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	var s shedstatus.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Layers) != 2 || s.Layers[1].Name != "worker" || !s.KeysMasked {
		t.Fatalf("snapshot = %+v", s)
	}
	if v, _ := s.Layers[1].Gauge(layerkit.GaugeShedLevel); v != 1.5 {
		t.Errorf("shed level %v", v)
	}
	if got := s.Layers[0].Priorities[shed.Critical.Index()].AdmittedTotal; got != 1 {
		t.Errorf("admitted %d", got)
	}
	if len(s.Layers[1].History) != 2 || strings.Contains(body, "RAWKEY") {
		t.Errorf("history %d points; raw key shown: %v", len(s.Layers[1].History), strings.Contains(body, "RAWKEY"))
	}
	since := s.Layers[1].History[0].Time
	_, body = get(t, srv.URL+"?format=json&since="+strconv.FormatInt(since, 10))
	if err := json.Unmarshal([]byte(body), &s); err != nil || len(s.Layers[1].History) != 1 {
		t.Errorf("since: %d points, %v", len(s.Layers[1].History), err)
	}
	if resp, _ := get(t, srv.URL+"?format=json&since=soon"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad since: %d", resp.StatusCode)
	}
}

func TestShownKeysAreEscaped(t *testing.T) {
	srv, _, _, _ := newPage(t, shedstatus.Config{ShowKeys: true})
	_, body := get(t, srv.URL)
	if !strings.Contains(body, "sk_live_RAWKEY&lt;script&gt;") || strings.Contains(body, "RAWKEY<script>") {
		t.Error("a shown key is not escaped")
	}
}

func TestReadOnly(t *testing.T) {
	srv, _, _, _ := newPage(t, shedstatus.Config{})
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, err = http.Head(srv.URL + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Errorf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
}
