package shed

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// The HTTP statuses a rejection carries. shed speaks no HTTP; these are the
// numbers an HTTP front end (package shedhttp) answers with, and what a job
// runner may log or map to its own codes.
const (
	// StatusTooManyRequests (429): the client went over its own limit.
	StatusTooManyRequests = 429
	// StatusServiceUnavailable (503): the service is shedding load.
	StatusServiceUnavailable = 503
)

// ErrRejected matches every *Rejection with errors.Is, for callers that only
// need to know that some layer said no.
var ErrRejected = errors.New("shed: request rejected")

// Rejection is a layer's "no". Use errors.As to get it from an error returned
// by Acquire, the chain or Do.
type Rejection struct {
	// Layer names the layer that rejected the request. Layers name
	// themselves, so that a rejection of a layer called outside a chain
	// says whose it is; the chain fills it in for those that do not.
	Layer string
	// Status is the HTTP status to answer with: StatusTooManyRequests (429)
	// when the client went over its own limit, StatusServiceUnavailable
	// (503) when the service is shedding load.
	Status int
	// RetryAfter is when trying again may succeed; zero when unknown.
	RetryAfter time.Duration
	// Reason is a short, client-safe explanation ("rate limit exceeded",
	// "queue full").
	Reason string
	// Policies are the limits the request violated; may be empty.
	Policies []Quota
	// Priority is the rejected request's priority, as the chain resolved
	// it; the chain fills it in (Unset from a layer called directly).
	Priority Priority
	// Waited is how long the request waited in a queue before it was rejected.
	Waited time.Duration
	// Fallback is set when the layer decided from a local estimate because its
	// shared store did not answer.
	Fallback bool
}

// Error describes the rejection for logs. It is not meant for clients: the
// HTTP middleware writes a problem document built from the fields instead.
func (r *Rejection) Error() string {
	var b strings.Builder
	b.WriteString("shed: ")
	if r.Layer == "" {
		b.WriteString("layer")
	} else {
		b.WriteString(r.Layer)
	}
	b.WriteString(" rejected ")
	if r.Priority == Unset {
		b.WriteString("a")
	} else {
		b.WriteString(r.Priority.String())
	}
	b.WriteString(" request (")
	b.WriteString(strconv.Itoa(r.Status))
	b.WriteString("): ")
	b.WriteString(r.Reason)
	if r.RetryAfter > 0 {
		b.WriteString(", retry after ")
		b.WriteString(r.RetryAfter.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrRejected) true for every rejection.
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, as the
// Retry-After header wants it; at least 1 when RetryAfter is positive.
func (r *Rejection) RetryAfterSeconds() int64 { return ceilSeconds(r.RetryAfter) }

// ceilSeconds rounds d up to whole seconds; negative durations give 0.
// internal/ratefield has the same for the RateLimit fields, which shed
// cannot import.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Throttled builds a 429 rejection: the client went over its own limit.
// policies are the limits it violated. The chain fills in Layer and
// Priority, so return a new rejection from every Acquire, never a shared one.
func Throttled(reason string, retryAfter time.Duration, policies ...Quota) *Rejection {
	return &Rejection{Status: StatusTooManyRequests, Reason: reason, RetryAfter: retryAfter, Policies: policies}
}

// Shed builds a 503 rejection: the service is shedding load. As for
// Throttled, the chain fills in Layer and Priority.
func Shed(reason string, retryAfter time.Duration, policies ...Quota) *Rejection {
	return &Rejection{Status: StatusServiceUnavailable, Reason: reason, RetryAfter: retryAfter, Policies: policies}
}
