package concurrency

import (
	"context"
	"errors"

	"github.com/loadshed/loadshed/shed"

	"github.com/loadshed/loadshed/shed/layerkit"
)

// wait queues a request refused by the overall limit until capacity frees
// (Enforcement.Action Queue). A request over its per-key limit is rejected
// at once instead: one layerkit.WaitQueue serves one pool of capacity, and a
// waiter blocked on its own key would hold up every other key behind it.
func (l *Layer) wait(ctx context.Context, req shed.Request, cost int64, t taken) (shed.Lease, error) {
	if t.over == keyLimit || l.queue == nil {
		return shed.Lease{}, l.rejection(req, t)
	}
	key := l.key(&req)
	var got taken
	// take runs under the queue's lock, so got is written before Wait
	// returns and read only after.
	take := func() bool {
		got = l.take(key, cost, l.perKey, l.limit.Load())
		return got.ok
	}
	giveBack := func() { l.untake(got, cost) }
	ticket, waited, err := l.queue.WaitRequest(ctx, req, req.Deadline, take, giveBack)
	if err != nil {
		err = layerkit.QueueRejection(shed.StatusServiceUnavailable, err, waited)
		var r *shed.Rejection
		if errors.As(err, &r) {
			limit := l.limit.Load()
			r.Layer, r.RetryAfter = l.name, l.retryAfter
			r.Policies = []shed.Quota{{Policy: PolicyOverall, Limit: limit, Remaining: 0, Service: true}}
		}
		return shed.Lease{}, err
	}
	ls := l.lease(&got, cost, l.limit.Load(), l.clock.Now())
	// Guarded with the ticket, so that the release charges the client for
	// the time it held the slot.
	s, _ := l.guards.Claim(&ls)
	l.queued.Issue(&ls, queuedGrant{s: s, ticket: ticket})
	ls.Waited = waited
	return ls, nil
}

// queuedGrant is what a grant from the queue holds: its per-key slot (nil
// without one) and the fair queue's ticket.
type queuedGrant struct {
	s      *slot
	ticket layerkit.Ticket
}

// untake gives back what a successful take claimed, without a lease.
func (l *Layer) untake(t taken, cost int64) {
	if !t.ok {
		return
	}
	if t.s != nil {
		t.s.n.Add(-cost)
	}
	if l.hasAll {
		l.inflight.Add(-cost)
	}
}
