package shedclient

import (
	"context"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedclient/internal/frontend"
)

// The client's front ends in other packages (shedclientgrpc) reach it
// through package frontend, so that a client speaking only HTTP does not
// link them.

func init() {
	frontend.Of = func(c any) frontend.Client { return frontEnd{c.(*Client)} }
}

type frontEnd struct{ c *Client }

func (f frontEnd) Options() frontend.Options {
	return frontend.Options{Token: f.c.cfg.Token, NoPropagation: f.c.cfg.NoPropagation, Idempotent: f.c.cfg.Idempotent}
}

func (f frontEnd) Run(ctx context.Context, fc frontend.Call) error {
	cl := call{
		dest: f.c.dest(fc.Dest), scope: fc.Scope, priority: fc.Priority,
		idempotent: fc.Idempotent, replayable: fc.Replayable,
		send: func(ctx context.Context, attempt int) answer {
			a := fc.Send(ctx, attempt)
			return answerOf(&a)
		},
	}
	return f.c.run(ctx, cl)
}

func (f frontEnd) Settle(dest, scope string, prio shed.Priority, fa frontend.Answer) {
	a := answerOf(&fa)
	d := f.c.dest(dest)
	now := f.c.clock.Now()
	if a.timedOut || !a.transportErr {
		d.count(prio, now, !a.rejected && !a.timedOut)
	}
	f.c.learn(d, scope, &a, now)
}

func answerOf(fa *frontend.Answer) answer {
	a := answer{
		rejected: fa.Rejected, quota: fa.Quota,
		retryAfter: fa.RetryAfter, hasRetry: fa.HasRetry, noRetry: fa.NoRetry,
		transportErr: fa.TransportErr, timedOut: fa.TimedOut, pending: fa.Pending,
	}
	if len(fa.Limits) > 0 {
		a.limits = parseLimits(fa.Limits, nil)
	}
	if len(fa.Policies) > 0 {
		a.policies = parseLimits(fa.Policies, nil)
	}
	if fa.RejectedIfLimits {
		if len(a.limits) > 0 {
			a.rejected = true
		} else {
			a.transportErr = true
		}
	}
	return a
}
