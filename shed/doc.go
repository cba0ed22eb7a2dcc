// Package shed is the spine of loadshed: the vocabulary every layer speaks
// (Priority, Request, Lease, Rejection, Mode, Action), the Chain that runs
// layers in sequence, the priority-aware wait queue, and the observer hooks.
// It speaks no HTTP: package shedhttp mounts a Chain as net/http and chi
// middleware, and Chain.Do runs one around any function (jobs, RPC).
//
// A request's path through a chain:
//
//	request ─► resolve (key, route, priority, cost, deadline)
//	        ─► layer 1 ─► layer 2 ─► ... ─► handler
//	        ─► leases released in reverse order, outcome recorded
//
// Each layer answers one question for one request. Acquiring gives a Lease
// or an error (a *Rejection); every lease is released exactly once with an
// Outcome, so adaptive layers learn only from real outcomes. A later layer's
// rejection releases what earlier layers granted.
//
// shed imports neither Prometheus nor OpenTelemetry; observers adapt events
// to them.
package shed
