package concurrency

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// Release removes the lease from Redis (or gives back the local share, for
// a lease granted while falling back). If Redis does not confirm, the
// renewer retries until the lease would have expired anyway. A lease this
// limiter did not grant, or already released, is ignored.
func (r *RedisLayer) Release(lease *shed.Lease, o shed.Outcome) {
	e, ok := lease.Ref.(*redisLease)
	if !ok {
		r.releaseLocal(lease, o)
		return
	}
	if e.owner != r || !e.released.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	delete(r.held, e)
	r.mu.Unlock()
	if r.async || r.gate.Down() {
		// Batched, or Redis is not answering: do not make the request wait.
		r.retryLater(e)
		return
	}
	err := releaseScript.Run(r.deadlines.Bound(context.Background()), r.client, e.keys, e.member, e.cost).Err()
	if err != nil {
		r.retryLater(e)
	}
}

// forget queues the removal of a lease whose acquire may or may not have
// reached Redis.
func (r *RedisLayer) forget(e *redisLease) {
	e.released.Store(true)
	r.mu.Lock()
	e.recheck = true
	r.mu.Unlock()
	r.retryLater(e)
}

// flushSoon is how long after a failed release or an unanswered acquire
// the clean-up first runs, off the request path. The renewer's ticks retry
// what it leaves.
const flushSoon = 5 * time.Millisecond

func (r *RedisLayer) retryLater(e *redisLease) {
	r.mu.Lock()
	r.pending = append(r.pending, e)
	if !r.soon && !r.closed {
		r.soon = true
		r.clock.AfterFunc(flushSoon, r.flushNow)
	}
	r.mu.Unlock()
}

// flushNow sends the pending removals. While Redis does not confirm them
// it tries again every probe interval, not at the renewer's next tick
// (TTL/3): a failed master's leases live on in the replica promoted in its
// place, and must be removed as soon as it answers, or they hold the
// fleet's slots for finished requests.
func (r *RedisLayer) flushNow() {
	r.mu.Lock()
	r.soon = false
	if r.closed {
		r.mu.Unlock()
		return // Close flushes what is pending
	}
	r.background.Add(1)
	r.mu.Unlock()
	defer r.background.Done()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.timeout, 100*time.Millisecond))
	err := r.flush(ctx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && len(r.pending) > 0 && !r.soon && !r.closed {
		r.soon = true
		r.clock.AfterFunc(r.gate.Interval(), r.flushNow)
	}
}

// tick is the renewer: every RenewEvery it retries unconfirmed releases and
// renews every lease held, each batch in one pipelined round trip.
func (r *RedisLayer) tick() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.background.Add(1)
	r.mu.Unlock()
	defer r.background.Done()
	ctx, cancel := context.WithTimeout(context.Background(), max(r.renewEvery/2, r.timeout))
	r.flush(ctx)
	r.renew(ctx)
	cancel()
	r.mu.Lock()
	if !r.closed {
		r.timer = r.clock.AfterFunc(r.renewEvery, r.tick)
	}
	r.mu.Unlock()
}

// flush retries the releases Redis has not confirmed, dropping those whose
// lease has expired by now anyway.
func (r *RedisLayer) flush(ctx context.Context) error {
	// One flush at a time, so that a request that waits for one in
	// progress (flushFirst) knows its removals have been sent.
	select {
	case r.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.flushing }()
	r.mu.Lock()
	todo := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	calls := make([]redisx.Call, len(todo))
	for i, e := range todo {
		calls[i] = redisx.Call{Keys: e.keys, Args: []any{e.member, e.cost}}
	}
	cmds := releaseScript.RunAll(ctx, r.client, calls)
	now := r.clock.Now().UnixNano()
	var keep []*redisLease
	var err error
	failed := 0
	r.mu.Lock()
	for i, c := range cmds {
		e := todo[i]
		switch {
		case c.Err() != nil:
			if now < e.expires.Load() {
				keep = append(keep, e)
				failed++
				err = c.Err()
			}
		case e.recheck:
			e.recheck = false
			keep = append(keep, e)
		}
	}
	r.pending = append(r.pending, keep...)
	r.mu.Unlock()
	if failed > 0 && redisx.IsOutage(err) {
		redisx.Reload(r.client)
	}
	if failed > 0 {
		return fmt.Errorf("concurrency: %d releases not confirmed by Redis: %w", failed, err)
	}
	return nil
}

// renewBatch is the most leases one renew script call carries.
const renewBatch = 256

// renew pushes back the expiry of every lease held, grouped by the sets
// they live in, in one pipeline.
func (r *RedisLayer) renew(ctx context.Context) {
	r.mu.Lock()
	if len(r.held) == 0 {
		r.mu.Unlock()
		return
	}
	groups := make(map[string][]*redisLease)
	for e := range r.held {
		g := strings.Join(e.keys, "\n")
		groups[g] = append(groups[g], e)
	}
	r.mu.Unlock()
	expires := r.clock.Now().Add(r.ttl).UnixNano()
	var calls []redisx.Call
	var batches [][]*redisLease
	for _, ls := range groups {
		for len(ls) > 0 {
			n := min(len(ls), renewBatch)
			batch := ls[:n]
			ls = ls[n:]
			args := make([]any, 0, 1+2*len(batch))
			args = append(args, r.ttl.Milliseconds())
			for _, e := range batch {
				args = append(args, e.member, e.cost)
			}
			calls = append(calls, redisx.Call{Keys: batch[0].keys, Args: args})
			batches = append(batches, batch)
		}
	}
	cmds := renewScript.RunAll(ctx, r.client, calls)
	for i, c := range cmds {
		gone, err := c.StringSlice()
		if err != nil {
			if redisx.IsOutage(err) {
				redisx.Reload(r.client)
			}
			continue
		}
		lost := make(map[string]bool, len(gone))
		for _, m := range gone {
			lost[m] = true
		}
		r.mu.Lock()
		for _, e := range batches[i] {
			if lost[e.member] {
				if _, ok := r.held[e]; ok {
					delete(r.held, e)
					r.stats.lost.Add(1)
				}
				continue
			}
			e.expires.Store(expires)
		}
		r.mu.Unlock()
	}
}

// renewNow renews every lease held and retries unconfirmed releases now,
// instead of at the next tick of the renewer.
func (r *RedisLayer) renewNow(ctx context.Context) error {
	err := r.flush(ctx)
	r.renew(ctx)
	return err
}
