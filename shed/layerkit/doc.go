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
//   - GuardPool issues a guard into each lease (Lease.Ref and Lease.ID)
//     and claims it once, so that releasing a copy of a released lease is
//     harmless.
package layerkit
