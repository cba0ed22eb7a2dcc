package shedhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// routeSeer records the route and priority of the last request it saw;
// wrapped in readingSeer, it says whether it reads the route
// (shed.RouteReader).
type routeSeer struct {
	reads bool
	route string
	prio  shed.Priority
}

func (l *routeSeer) Name() string { return "seer" }
func (l *routeSeer) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	l.route, l.prio = req.Route, req.Priority
	return shed.Lease{}, nil
}

type readingSeer struct{ *routeSeer }

func (l readingSeer) ReadsRoute() bool { return l.reads }

// The middleware finds the route pattern only when something reads it: a
// layer that reads it or does not say, an observer, or a route priority.
func TestRouteFoundOnlyWhenRead(t *testing.T) {
	cases := []struct {
		name      string
		layer     func(*routeSeer) shed.Layer
		observer  shed.Observer
		prios     shedhttp.RoutePriorities
		wantRoute string
		wantPrio  shed.Priority
	}{
		{"layer ignores the route", func(s *routeSeer) shed.Layer { return readingSeer{s} }, nil, nil, "", shed.Default},
		{"layer reads the route", func(s *routeSeer) shed.Layer { s.reads = true; return readingSeer{s} }, nil, nil, "GET /v1/things/{id}", shed.Default},
		{"layer does not say", func(s *routeSeer) shed.Layer { return s }, nil, nil, "GET /v1/things/{id}", shed.Default},
		{"an observer", func(s *routeSeer) shed.Layer { return readingSeer{s} }, shed.ObserverFunc(func(shed.Event) {}), nil, "GET /v1/things/{id}", shed.Default},
		{"a route priority", func(s *routeSeer) shed.Layer { return readingSeer{s} }, nil,
			shedhttp.RoutePriorities{"GET /v1/things/{id}": shed.Critical}, "GET /v1/things/{id}", shed.Critical},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seer := &routeSeer{}
			chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{tc.layer(seer)}, Observer: tc.observer})
			if err != nil {
				t.Fatal(err)
			}
			r := chi.NewRouter()
			r.Use(shedhttp.MustNew(chain, shedhttp.Config{Priorities: tc.prios}))
			r.Get("/v1/things/{id}", func(w http.ResponseWriter, _ *http.Request) {})
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/things/7", nil))
			if seer.route != tc.wantRoute || seer.prio != tc.wantPrio {
				t.Errorf("layer saw route %q, priority %v; want %q, %v", seer.route, seer.prio, tc.wantRoute, tc.wantPrio)
			}
		})
	}
}
