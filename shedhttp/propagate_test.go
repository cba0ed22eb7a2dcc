package shedhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedhttp"
)

func TestPropagatedPriorityAndBudget(t *testing.T) {
	var untrusted []string
	cfg := shedhttp.Config{
		ClientIP:        shedhttp.ClientIPConfig{TrustedProxies: []string{"10.0.0.1"}},
		DefaultPriority: shed.Sheddable,
		Propagation: &propagation.Config{
			TrustedPeers: []string{"192.0.2.0/24"},
			Token:        "s3cret",
			OnUntrusted:  func(caller string) { untrusted = append(untrusted, caller) },
		},
	}
	for _, tc := range []struct {
		name, remote, xff, prio, token, budget string
		want                                   shed.Priority
		untrusted                              int
	}{
		{name: "trusted peer", remote: "192.0.2.7:5000", prio: "critical", want: shed.Critical},
		{name: "untrusted peer", remote: "203.0.113.7:5000", prio: "critical", want: shed.Sheddable, untrusted: 1},
		// An outside client behind the trusted proxy is still outside.
		{name: "through a proxy", remote: "10.0.0.1:5000", xff: "203.0.113.7", prio: "critical", want: shed.Sheddable, untrusted: 1},
		{name: "trusted peer through a proxy", remote: "10.0.0.1:5000", xff: "192.0.2.8", prio: "critical", want: shed.Critical},
		{name: "token", remote: "203.0.113.7:5000", prio: "critical", token: "s3cret", want: shed.Critical},
		{name: "none", remote: "203.0.113.7:5000", want: shed.Sheddable},
		{name: "budget", remote: "203.0.113.7:5000", budget: "250", want: shed.Sheddable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			untrusted = nil
			l := shedtest.NewLayer("l")
			var s seen
			l.OnAcquire = s.add
			var inHandler shed.Priority
			var left time.Duration
			h := newMW(t, newChain(t, l), cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inHandler, _ = shed.PriorityFrom(r.Context())
				if d, ok := r.Context().Deadline(); ok {
					left = time.Until(d)
				}
			}))
			r := httptest.NewRequest("GET", "/reports", nil)
			r.RemoteAddr = tc.remote
			for k, v := range map[string]string{"X-Forwarded-For": tc.xff, propagation.PriorityHeader: tc.prio,
				propagation.TokenHeader: tc.token, propagation.BudgetHeader: tc.budget} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if p := s.last(t).Priority; p != tc.want {
				t.Fatalf("layer saw %v, want %v", p, tc.want)
			}
			if inHandler != tc.want {
				t.Fatalf("handler's context has %v, want %v", inHandler, tc.want)
			}
			if len(untrusted) != tc.untrusted {
				t.Fatalf("untrusted %v, want %d", untrusted, tc.untrusted)
			}
			if tc.budget != "" {
				if dl := s.last(t).Deadline; dl.IsZero() || left <= 0 || left > 250*time.Millisecond {
					t.Fatalf("budget 250ms: layer's deadline %v, handler has %v left", dl, left)
				}
			} else if left != 0 {
				t.Fatalf("a deadline without a budget: %v", left)
			}
		})
	}
}
