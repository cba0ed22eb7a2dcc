package shedclient

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

// Transport returns an http.RoundTripper that sends through base (nil:
// http.DefaultTransport) as the package describes. Requests it does not
// send fail with a *QuotaError or a *ThrottleError; a request it retries
// returns the last attempt's response.
func (c *Client) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{c: c, base: base}
}

type transport struct {
	c    *Client
	base http.RoundTripper
}

// maxDrain bounds what is read of a rejected response's body before the
// connection is reused for a retry.
const maxDrain = 4 << 10

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	prio, hasPrio := shed.PriorityFrom(ctx)
	if !prio.Valid() {
		prio, hasPrio = shed.Default, false
	}
	var resp *http.Response
	var err error
	scope := req.URL.Host
	if t.c.cfg.HTTPScope != nil {
		scope += " " + t.c.cfg.HTTPScope(req)
	}
	cl := call{
		dest: t.c.dest(req.URL.Host), scope: scope, priority: prio,
		idempotent: idempotent(req),
		replayable: req.Body == nil || req.Body == http.NoBody || req.GetBody != nil,
	}
	cl.send = func(ctx context.Context, attempt int) answer {
		if resp != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
			resp.Body.Close()
			resp = nil
		}
		r, rerr := t.c.outgoingHTTP(req, attempt, hasPrio, prio)
		if rerr != nil {
			err = rerr
			return answer{transportErr: true}
		}
		resp, err = t.base.RoundTrip(r)
		if err != nil {
			return answer{transportErr: true, timedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)}
		}
		return answerOfHTTP(resp, t.c.clock)
	}
	if e := t.c.run(ctx, cl); e != nil {
		if resp != nil {
			// A retry was held back: the earlier answer is not returned.
			resp.Body.Close()
		}
		return nil, e
	}
	return resp, err
}

// outgoingHTTP returns the request to send: req itself when there is
// nothing to add, else a clone (a RoundTripper must not change its
// request) with the propagated fields and, for a retry, a fresh body.
func (c *Client) outgoingHTTP(req *http.Request, attempt int, hasPrio bool, prio shed.Priority) (*http.Request, error) {
	dl, hasDL := req.Context().Deadline()
	propagate := !c.cfg.NoPropagation && (hasPrio || hasDL)
	if attempt == 0 && !propagate {
		return req, nil
	}
	r := req.Clone(req.Context())
	if attempt > 0 && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	if propagate {
		if hasPrio {
			r.Header.Set(propagation.PriorityHeader, prio.String())
			if c.cfg.Token != "" {
				r.Header.Set(propagation.TokenHeader, c.cfg.Token)
			}
		}
		if hasDL {
			r.Header.Set(propagation.BudgetHeader, propagation.FormatBudget(dl, c.clock.Now()))
		}
	}
	return r, nil
}

// idempotent reports whether req may be sent twice (RFC 9110 §9.2.2), or
// carries an Idempotency-Key saying so.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

func answerOfHTTP(resp *http.Response, clock shed.Clock) answer {
	var a answer
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		a.rejected, a.quota = true, true
	case http.StatusServiceUnavailable:
		a.rejected = true
	}
	h := resp.Header
	if v := h["Retry-After"]; len(v) > 0 {
		a.retryAfter, a.hasRetry = parseRetryAfter(v[0], clock.Now())
	}
	if v := h["Ratelimit"]; len(v) > 0 {
		a.limits = parseLimits(v, nil)
	}
	if v := h["Ratelimit-Policy"]; len(v) > 0 {
		a.policies = parseLimits(v, nil)
	}
	return a
}
