// Package layerkit is the toolkit for writing a shed.Layer: what every
// layer of this module uses to decide, queue and release alike, and what
// users composing layers never need to see.
//
//	switch layerkit.Decide(&l.enf, now, withinLimit, withinCeiling, &l.episode) {
//	case layerkit.Admit, layerkit.AdmitOver, layerkit.AdmitDryRun:
//		lease := shed.NewLease(l)
//		l.guards.Issue(&lease, slot) // a layerkit.GuardPool: released once, whatever the copies
//		return lease, nil
//	case layerkit.Wait:
//		waited, err := l.queue.Wait(ctx, req.Priority, req.Deadline, take, giveBack)
//		if err != nil {
//			return shed.Lease{}, layerkit.QueueRejection(shed.StatusServiceUnavailable, err, waited)
//		}
//		return l.granted(waited), nil
//	}
//	return shed.Lease{}, shed.Shed("over capacity", retryAfter, quota)
//
// It holds:
//
//   - Decide and DecideOver turn where a request stands against its limit
//     into a Verdict, applying the shed.Enforcement's mode (hard, soft,
//     elastic), dry run and action in one place; an Episode bounds a soft
//     overage in time.
//   - WaitQueue queues requests for capacity, highest priority first,
//     bounded in length and wait, cancellation-safe; QueueRejection turns
//     its errors into the rejection every layer returns alike.
//   - NewFairQueue makes a WaitQueue that shares each priority's capacity
//     among clients (the request's Key), max-min fairly, weighted and
//     cost-aware, in memory bounded whatever the number of keys; its
//     FlowStats and TopClients feed gauges and a status page.
//
// # Fair share
//
// Within one priority a fair queue gives capacity to the client that has
// had the least of it, counted in seat-seconds: a grant's units times the
// time its slot was held (the layer returns the grant's Ticket when the
// lease is released), divided by the client's weight. That is max-min
// fairness without a per-client number: a client asking less than an equal
// share gets all it asks, and the others split what it leaves, so a flood
// from one client takes nothing from the rest and capacity never idles for
// want of a quota. A client that holds its slots longer is granted fewer
// of them. Priorities stay strict: a priority is served only while none
// above it waits. When the queue is full, the newest waiter of the client
// with the most waiters is refused, not a newcomer with half as many or
// fewer (under AdaptiveLIFO, that client's oldest waiter, whoever the
// newcomer: newest first serves it last; but while that client floods,
// holding most of the waiters as others ask, its own newcomer is refused,
// which costs the server less than queueing it to give up another of its
// waiters). Among clients with as many waiters, the waiter given up is the
// oldest of theirs under AdaptiveLIFO, else the newest. Clients even in
// their service (within fairWindow grants' charge of the least served),
// and any client with a single request waiting, are served in the order a
// plain WaitQueue would serve them, first in first out (or newest first
// under AdaptiveLIFO), and a service with one client is served exactly so:
// only a client ahead with a backlog waits for the least served. While the
// clients so held back hold most of a priority's waiters (a flood), the
// others are served first in first out even under AdaptiveLIFO: the flood
// is the standing queue that newest first is for. A client that starts
// waiting starts that many grants behind the client served last, as
// FQ-CoDel serves new flows first: a client that asks now and then is
// served ahead of those that keep the queue full, while idling earns no
// more credit than those few grants.
//
// Memory is bounded as in Kubernetes' API Priority and Fairness: each
// priority has FairQueues flows, and a client's key is dealt a hand of
// FairHand of them by its hash (shuffle-sharding). A request joins the
// flow of its hand its client already waits in, or else the shortest, so
// that two clients share a flow only when one's whole hand is busy.
// Neither the memory nor the time of a decision grows with the number of
// distinct keys (BenchmarkFairQueueKeys: 1,000 against 1,000,000).
//
// A client that owns many keys counts as that many clients: with k keys
// waiting at one priority it may hold up to min(k, FairQueues) flows, so
// it can take up to FairQueues/(FairQueues+1) of the priority's capacity
// from a single other client, and a client sending a fresh key with every
// request is served as a crowd of one-request clients, each request about
// as likely to be refused as any other's, as in a queue that is not fair.
// Where one caller can mint keys, key by what it cannot mint (an account
// rather than an API key, a network rather than an address).
//   - GuardPool issues a guard into each lease (Lease.Ref and Lease.ID)
//     and claims it once, so that releasing a copy of a released lease is
//     harmless.
package layerkit
