package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// localShare is the local limiter of this instance's share of the limits
// among n instances (redisx.Share: rounded down, so the fleet never admits
// more than a limit). A limit whose share is 0 refuses every request while
// Redis does not answer (zeroKey, zeroAll); lim is nil when both are.
type localShare struct {
	n       int
	lim     *Layer
	zeroKey bool
	zeroAll bool
}

// maxOldShares bounds the replaced shares kept to release the fallback
// leases they granted. A lease of a share dropped beyond them is released
// nowhere, which is harmless: a replaced share decides nothing any more.
const maxOldShares = 4

// share returns the local share for the instances now counted, building
// it when the count moved (rare, and never during an outage: counts come
// from Redis). Leases of an older share are released through their own
// limiter (see releaseLocal).
func (r *RedisLayer) share() *localShare {
	n := r.Instances()
	cur := r.local.Load()
	if cur != nil && cur.n == n {
		return cur
	}
	next := r.newShare(n)
	if !r.local.CompareAndSwap(cur, next) {
		return r.local.Load()
	}
	if cur != nil && cur.lim != nil {
		r.oldMu.Lock()
		r.old = append(r.old, cur.lim)
		if len(r.old) > maxOldShares {
			r.old = r.old[1:]
		}
		r.oldMu.Unlock()
	}
	return next
}

func (r *RedisLayer) newShare(n int) *localShare {
	s := &localShare{n: n}
	lc := r.localCfg
	lc.Limit = redisx.Share(r.limit, n)
	lc.PerKey = redisx.Share(r.perKey, n)
	s.zeroAll = r.limit > 0 && lc.Limit == 0
	s.zeroKey = r.perKey > 0 && lc.PerKey == 0
	if lc.Limit == 0 && lc.PerKey == 0 {
		return s
	}
	lim, err := New(lc)
	if err != nil {
		// A share of a valid config is valid; never fail open.
		s.zeroAll, s.zeroKey = r.limit > 0, r.perKey > 0
		return s
	}
	s.lim = lim
	return s
}

// acquireLocal decides from this instance's share of the limits.
func (r *RedisLayer) acquireLocal(ctx context.Context, req shed.Request) (shed.Lease, error) {
	s := r.share()
	if s.zeroKey || s.zeroAll {
		over := allLimit
		if s.zeroKey {
			over = keyLimit
		}
		rej := r.rejection(req, over, 0)
		rej.Fallback = true
		return shed.Lease{}, rej
	}
	if over, n := r.heldOver(req, s); over != none {
		rej := r.rejection(req, over, n)
		rej.Fallback = true
		return shed.Lease{}, rej
	}
	in, err := s.lim.Acquire(ctx, req)
	if err != nil {
		var rej *shed.Rejection
		if errors.As(err, &rej) {
			rej.Fallback = true
		}
		return shed.Lease{}, err
	}
	ls := shed.NewLease(r)
	ls.Ref, ls.ID, ls.Cost, ls.Acquired = in.Ref, in.ID, in.Cost, in.Acquired
	ls.Quota, ls.Waited, ls.Over, ls.DryRun = in.Quota, in.Waited, in.Over, in.DryRun
	ls.Fallback = true
	return ls, nil
}

// releaseLocal gives a lease of a local share back to the share that
// granted it: the current one, or one replaced since (each ignores a lease
// it did not grant, and a second release of any copy).
func (r *RedisLayer) releaseLocal(lease *shed.Lease, o shed.Outcome) {
	if l := r.localLimiter(); l != nil {
		l.Release(lease, o)
	}
	r.oldMu.Lock()
	old := r.old
	r.oldMu.Unlock()
	for _, l := range old {
		l.Release(lease, o)
	}
}

// keyEpisode returns the soft-mode overage episode of req's key. It lives in
// the local share's slot for the key, so soft episodes are tracked per
// instance; nil without a per-key limit or outside soft mode.
func (r *RedisLayer) keyEpisode(req shed.Request) *layerkit.Episode {
	if r.enf.Mode != shed.Soft {
		return nil
	}
	l := r.localLimiter()
	if l == nil || l.keys == nil {
		return nil
	}
	return &l.keys.get(l.key(&req)).ep
}

func instanceID() (string, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("concurrency: instance id: %w", err)
	}
	return hex.EncodeToString(id[:]), nil
}

func joinErrs(errs ...error) error { return errors.Join(errs...) }

// heldOver says which share a request would exceed counting, besides what
// the local share has admitted, the leases this instance still holds in
// Redis (admitted there before the outage, still running): the fallback
// starts from what this instance knows it holds, so that one instance
// alone never goes above a limit across an outage, and a fleet by at most
// one share per instance. A lease released meanwhile stops counting here
// at once, and is removed from Redis when it answers.
func (r *RedisLayer) heldOver(req shed.Request, s *localShare) (which, int64) {
	cost := req.Units()
	perKey := r.keyFor(req)
	var all, key int64
	r.mu.Lock()
	for e := range r.held {
		all += e.cost
		if perKey != "" && e.keys[0] == perKey {
			key += e.cost
		}
	}
	r.mu.Unlock()
	if all == 0 || r.enf.DryRun {
		return none, 0
	}
	lc := s.lim
	if perKey != "" && lc.perKey > 0 {
		k := req.Key
		if r.keyBy == KeyByRoute {
			k = req.Route
		}
		if n := key + lc.InFlightKey(k); n+cost > r.enf.Ceiling(lc.perKey) {
			return keyLimit, n
		}
	}
	if l := lc.Limit(); l > 0 {
		if n := all + lc.InFlight(); n+cost > r.enf.Ceiling(l) {
			return allLimit, n
		}
	}
	return none, 0
}
