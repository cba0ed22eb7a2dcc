package shedstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// sharing is a layer that reports gauges and clients, as the fair-share
// layers do.
type sharing struct {
	*shedtest.Layer
	inFlight float64
	clients  []layerkit.ClientShare
}

func (s *sharing) ReportGauges(emit func(layerkit.Gauge)) {
	emit(layerkit.Gauge{Layer: s.Name(), Name: layerkit.GaugeInFlight, Value: s.inFlight})
	emit(layerkit.Gauge{Layer: s.Name(), Name: layerkit.GaugeLimit, Value: 10})
	emit(layerkit.Gauge{Layer: s.Name(), Name: layerkit.GaugeShedFraction, Priority: shed.Sheddable, Value: 0.5})
}

func (s *sharing) TopClients(n int) []layerkit.ClientShare {
	return s.clients[:min(n, len(s.clients))]
}

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func setup(t *testing.T, cfg shedstatus.Config) (*shedstatus.Recorder, *shed.Chain, *shedtest.Clock, *shedtest.Layer, *sharing) {
	t.Helper()
	clock := shedtest.NewClock(start)
	first := shedtest.NewLayer("first")
	second := &sharing{Layer: shedtest.NewLayer("second"), clients: []layerkit.ClientShare{
		{Key: "sk_live_alice_secret", Priority: shed.Default, InFlight: 3, Share: 0.6},
		{Key: "sk_live_bob_secret", Priority: shed.Default, InFlight: 2, Share: 0.4},
	}}
	cfg.Layers = []shed.Layer{first, second}
	cfg.Clock = clock
	rec, err := shedstatus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	chain, err := shed.NewChain(shed.Config{Layers: cfg.Layers, Observer: rec, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return rec, chain, clock, first, second
}

func do(c *shed.Chain, p shed.Priority, n int) {
	for range n {
		_ = c.Do(context.Background(), shed.Request{Priority: p, Route: "GET /x"}, func(context.Context) error { return nil })
	}
}

func TestRatesByPriorityAndHistory(t *testing.T) {
	rec, chain, clock, _, second := setup(t, shedstatus.Config{History: 3 * time.Second})
	do(chain, shed.Critical, 4)
	second.Reject(shed.Shed("queue full", time.Second, shed.Quota{Policy: "overall"}))
	do(chain, shed.Sheddable, 6)
	second.inFlight = 7
	clock.Advance(2 * time.Second) // one sample, over 2 s

	s := rec.Snapshot(time.Time{})
	if len(s.Layers) != 2 || s.Layers[0].Name != "first" || s.Layers[1].Name != "second" {
		t.Fatalf("layers = %+v", s.Layers)
	}
	first, sec := s.Layers[0], s.Layers[1]
	if first.Kind != "shedtest.Layer" || sec.Kind != "shedstatus_test.sharing" {
		t.Errorf("kinds = %q, %q", first.Kind, sec.Kind)
	}
	byP := func(l shedstatus.Layer, p shed.Priority) shedstatus.PriorityRates { return l.Priorities[p.Index()] }
	if r := byP(first, shed.Critical); r.Admitted != 2 || r.AdmittedTotal != 4 {
		t.Errorf("first critical = %+v, want 2/s, 4 in all", r)
	}
	if r := byP(first, shed.Sheddable); r.Admitted != 3 || r.Shed != 0 {
		t.Errorf("first sheddable = %+v, want 3/s admitted", r)
	}
	if r := byP(sec, shed.Sheddable); r.Shed != 3 || r.ShedTotal != 6 || r.Admitted != 0 {
		t.Errorf("second sheddable = %+v, want 3/s shed, 6 in all", r)
	}
	if len(sec.History) != 1 || sec.History[0].InFlight != 7 || sec.History[0].Limit != 10 ||
		sec.History[0].Shed != 3 || sec.History[0].Admitted != 2 {
		t.Errorf("second's history = %+v", sec.History)
	}
	if v, ok := sec.Gauge(layerkit.GaugeInFlight); !ok || v != 7 {
		t.Errorf("in flight = %v, %v", v, ok)
	}
	// The rates are of the last period only.
	clock.Advance(time.Second)
	s = rec.Snapshot(time.Time{})
	if r := s.Layers[1].Priorities[shed.Sheddable.Index()]; r.Shed != 0 || r.ShedTotal != 6 {
		t.Errorf("a quiet second: %+v", r)
	}
	// History keeps History/Every points, oldest first, and since cuts it.
	for range 5 {
		clock.Advance(time.Second)
	}
	h := rec.Snapshot(time.Time{}).Layers[1].History
	if len(h) != 3 || h[0].Time >= h[1].Time || h[2].Time != clock.Now().UnixMilli() {
		t.Fatalf("history = %+v, want the last 3 seconds", h)
	}
	if h2 := rec.Snapshot(time.UnixMilli(h[1].Time)).Layers[1].History; len(h2) != 1 || h2[0] != h[2] {
		t.Errorf("since the second point: %+v", h2)
	}
}

func TestRejectionRingKeepsTheLast(t *testing.T) {
	rec, chain, _, first, _ := setup(t, shedstatus.Config{Rejections: 3})
	for i := range 5 {
		first.Reject(shed.Throttled(fmt.Sprintf("reason %d", i), 0, shed.Quota{Policy: "per-key"}))
		do(chain, shed.Default, 1)
	}
	s := rec.Snapshot(time.Time{})
	if s.RejectionsTotal != 5 || len(s.Rejections) != 3 {
		t.Fatalf("total %d, kept %d", s.RejectionsTotal, len(s.Rejections))
	}
	for i, want := range []string{"reason 4", "reason 3", "reason 2"} {
		r := s.Rejections[i]
		if r.Reason != want || r.Layer != "first" || r.Policy != "per-key" || r.Status != 429 ||
			r.Priority != "default" || r.Route != "GET /x" || !r.Time.Equal(start) {
			t.Errorf("rejection %d = %+v, want %s", i, r, want)
		}
	}
}

func TestKeysMaskedUnlessShown(t *testing.T) {
	rec, _, _, _, _ := setup(t, shedstatus.Config{})
	s := rec.Snapshot(time.Time{})
	b, _ := json.Marshal(s)
	if strings.Contains(string(b), "sk_live") || !s.KeysMasked {
		t.Fatalf("a raw key in %s", b)
	}
	cs := s.Layers[1].Clients
	if !s.Layers[1].ReportsClients || s.Layers[0].ReportsClients || len(cs) != 2 {
		t.Fatalf("clients = %+v", s.Layers)
	}
	if cs[0].Key == cs[1].Key || !strings.HasPrefix(cs[0].Key, "#") || cs[0].Share != 0.6 || cs[0].InFlight != 3 {
		t.Errorf("masked clients = %+v", cs)
	}
	if again := rec.Snapshot(time.Time{}).Layers[1].Clients; again[0].Key != cs[0].Key {
		t.Errorf("mask not stable: %q then %q", cs[0].Key, again[0].Key)
	}
	// Another recorder masks with another salt.
	other, _, _, _, _ := setup(t, shedstatus.Config{})
	if k := other.Snapshot(time.Time{}).Layers[1].Clients[0].Key; k == cs[0].Key {
		t.Errorf("two recorders share a mask: %q", k)
	}

	shown, _, _, _, _ := setup(t, shedstatus.Config{ShowKeys: true, TopClients: 1})
	s = shown.Snapshot(time.Time{})
	if cs := s.Layers[1].Clients; s.KeysMasked || len(cs) != 1 || cs[0].Key != "sk_live_alice_secret" {
		t.Errorf("shown: %+v", cs)
	}
	custom, _, _, _, _ := setup(t, shedstatus.Config{MaskKey: func(k string) string { return k[:7] + "…" }})
	if k := custom.Snapshot(time.Time{}).Layers[1].Clients[0].Key; k != "sk_live…" {
		t.Errorf("custom mask: %q", k)
	}
}

func TestLayersLearntFromEvents(t *testing.T) {
	rec, err := shedstatus.New(shedstatus.Config{Clock: shedtest.NewClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	for i := range shedstatus.MaxLayers + 3 {
		rec.Observe(shed.Event{Layer: fmt.Sprintf("rls:d%d", i), Kind: shed.Admitted})
	}
	rec.Observe(shed.Event{Layer: "rls:d0", Kind: shed.Rejected, Status: 429, Policy: "d0.key"})
	s := rec.Snapshot(time.Time{})
	if len(s.Layers) != shedstatus.MaxLayers {
		t.Fatalf("%d layers, want the bound %d", len(s.Layers), shedstatus.MaxLayers)
	}
	if l := s.Layers[0]; l.Name != "rls:d0" || l.Kind != "" || l.Priorities[shed.Default.Index()].AdmittedTotal != 1 ||
		l.Priorities[shed.Default.Index()].ShedTotal != 1 {
		t.Errorf("first learnt layer = %+v", l)
	}
	if r := s.Rejections[0]; r.Priority != "" || r.Policy != "d0.key" {
		t.Errorf("rejection without a priority = %+v", r)
	}
}

func TestRulesAndReload(t *testing.T) {
	at := start.Add(time.Minute)
	rec, err := shedstatus.New(shedstatus.Config{
		Rules: func() []shedstatus.Rule {
			return []shedstatus.Rule{{Key: "d.k", Limit: "unit=SECOND requests_per_unit=5", Hits: 9}}
		},
		Reload: func() shedstatus.Reload { return shedstatus.Reload{Time: at, Error: "bad", Refused: 1} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	s := rec.Snapshot(time.Time{})
	if len(s.Rules) != 1 || s.Rules[0].Hits != 9 || s.Reload == nil || s.Reload.Error != "bad" || !s.Reload.Time.Equal(at) {
		t.Errorf("rules %+v, reload %+v", s.Rules, s.Reload)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []shedstatus.Config{
		{Layers: []shed.Layer{nil}},
		{Every: -1},
		{Rejections: -1},
		{Layers: make([]shed.Layer, shedstatus.MaxLayers+1)},
	} {
		if r, err := shedstatus.New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
