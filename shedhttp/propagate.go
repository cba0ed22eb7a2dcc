package shedhttp

import (
	"context"
	"net/http"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

// propagatedPriority returns the priority r's caller propagated
// (Loadshed-Priority), when Config.Propagation trusts the caller: its
// client address (as Config.ClientIP resolves it) is a trusted peer, or it
// presents the shared token. Anyone else's is ignored and counted.
func (m *middleware) propagatedPriority(r *http.Request, key string) (shed.Priority, bool) {
	w := firstHeader(r.Header, propagation.PriorityHeader)
	if w == "" {
		return shed.Unset, false
	}
	addr, _ := m.clientIP.Addr(r)
	p, err := m.trust.Accept(w, addr, firstHeader(r.Header, propagation.TokenHeader), key)
	return p, err == nil && p.Valid()
}

// propagate returns r with what the handler passes on to the calls it
// makes: the request's priority (shed.WithPriority) and, when the caller
// sent a budget (Loadshed-Budget), a deadline no later than it. A budget
// can only shorten the request, so it is taken from any caller. Call
// cancel when the request ends.
func (m *middleware) propagate(r *http.Request, p shed.Priority) (_ *http.Request, cancel context.CancelFunc) {
	ctx := shed.WithPriority(r.Context(), p)
	cancel = func() {}
	if v := firstHeader(r.Header, propagation.BudgetHeader); v != "" {
		if d, ok := propagation.ParseBudget(v); ok {
			ctx, cancel = context.WithTimeout(ctx, d)
		}
	}
	return r.WithContext(ctx), cancel
}
