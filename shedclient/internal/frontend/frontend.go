// Package frontend is what a front end of package shedclient living in
// another package (the gRPC interceptors of shedclientgrpc) gives a
// *shedclient.Client for one request, and what it gets back, without
// the Client exporting it to its users.
package frontend

import (
	"context"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// Answer is what one attempt taught the client.
type Answer struct {
	// Rejected: the server refused the request for its capacity or, with
	// Quota, for the client's quota.
	Rejected, Quota bool
	// RejectedIfLimits: a rejection if Limits holds an item, else a
	// transport failure (an UNAVAILABLE the server said nothing with).
	RejectedIfLimits bool
	// RetryAfter is the server's delay, when HasRetry; NoRetry: it said
	// not to retry.
	RetryAfter        time.Duration
	HasRetry, NoRetry bool
	// Limits and Policies are the lines of the RateLimit and
	// RateLimit-Policy fields.
	Limits, Policies []string
	// TransportErr: no answer from the server; TimedOut: the request's
	// deadline passed first; Pending: the answer comes later (a stream's
	// first message), through Client.Settle.
	TransportErr, TimedOut, Pending bool
}

// Call is one request through the client.
type Call struct {
	// Dest is the destination (a gRPC target), Scope what its quotas are
	// remembered for (a method).
	Dest, Scope string
	Priority    shed.Priority
	// Idempotent: the request is safe to send twice; Replayable: it can be.
	Idempotent, Replayable bool
	// Send makes one attempt.
	Send func(ctx context.Context, attempt int) Answer
}

// Options are the parts of shedclient.Config a front end reads.
type Options struct {
	Token         string
	NoPropagation bool
	Idempotent    func(method string) bool
}

// Client is a front end's view of a *shedclient.Client.
type Client interface {
	// Run makes the attempts of call: nil when the last was sent (its
	// result is the caller's to return), else the error that stopped it.
	Run(ctx context.Context, call Call) error
	// Settle learns from an answer that came after Run returned.
	Settle(dest, scope string, prio shed.Priority, a Answer)
	Options() Options
}

// Of returns the view of c, a *shedclient.Client. Package shedclient sets
// it when it is initialised, before any package importing it is.
var Of func(c any) Client
