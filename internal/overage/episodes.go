// Package overage holds the rule by which a key goes past its limit in the
// Soft and Elastic modes: the per-key episodes that bound a soft overage
// in time, and the verdict on a request over one or more limits. ratelimit's
// Layer (all the keys a request is over, together) and rls's soft limits
// (each limit alone) both decide through Episodes.Verdict.
package overage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Episodes keeps a soft-mode overage episode per key, so that one client's
// overage is bounded in time by its own history, not by other clients'.
// An episode must outlive the key's return within its limit (that is what
// bounds the overage under sustained load), so entries stay until the map
// is full; then those past forget (no request over the limit for OverageFor
// + OverageCooldown: a fresh episode would behave the same) are dropped,
// and failing that the one least recently over its limit.
//
// The zero value is not ready: call Init first.
type Episodes struct {
	maxKeys int
	forget  int64 // ns
	mu      sync.RWMutex
	m       map[string]*episode
}

type episode struct {
	layerkit.Episode
	seen atomic.Int64 // Unix ns of the last overage
}

// Init readies e to hold at most maxKeys episodes of enf's lengths.
func (e *Episodes) Init(maxKeys int, enf *shed.Enforcement) {
	e.maxKeys = maxKeys
	length := enf.OverageFor
	if length == 0 {
		length = shed.DefaultOverageFor
	}
	cool := enf.OverageCooldown
	if cool == 0 {
		cool = length
	}
	e.forget = int64(length + cool)
	e.m = map[string]*episode{}
}

// Get returns key's episode, beginning one when key has none, and records
// now (Unix ns) as the key's last overage.
func (e *Episodes) Get(key string, now int64) *layerkit.Episode {
	e.mu.RLock()
	ep := e.m[key]
	e.mu.RUnlock()
	if ep == nil {
		e.mu.Lock()
		if ep = e.m[key]; ep == nil {
			if len(e.m) >= e.maxKeys {
				e.evict(now)
			}
			ep = &episode{}
			e.m[key] = ep
		}
		e.mu.Unlock()
	}
	ep.seen.Store(now)
	return &ep.Episode
}

// maxInline is how many keys Verdict decides without allocating:
// ratelimit's MaxRules.
const maxInline = 8

// Verdict decides a request over the limit counted under each of keys, in
// enf's mode: within says whether the overage of every such limit had room
// for it (the caller took it there). In Soft mode each key's episode is
// begun or read at clock's now, every one records the request, and the
// overage is allowed only when each allows it; in Elastic mode enf's
// headroom decides; in Hard mode the request is over. What is refused is
// Deny, Wait or AdmitDryRun by enf's action and dry run
// (layerkit.DecideOver). The caller gives back what it took from the
// overage unless the verdict is AdmitOver.
func (e *Episodes) Verdict(enf *shed.Enforcement, clock shed.Clock, within bool, keys ...string) layerkit.Verdict {
	if enf.Mode != shed.Soft {
		return layerkit.DecideOver(enf, time.Time{}, within)
	}
	now := clock.Now()
	var buf [maxInline]*layerkit.Episode
	eps := buf[:0]
	for _, k := range keys {
		eps = append(eps, e.Get(k, now.UnixNano()))
	}
	return layerkit.DecideOver(enf, now, within, eps...)
}

// Len is the number of keys with an episode.
func (e *Episodes) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.m)
}

// evict drops the episodes past forgetting or, if there are none, the one
// least recently over its limit; mu is held.
func (e *Episodes) evict(now int64) {
	var oldest string
	at, freed := int64(0), false
	for k, ep := range e.m {
		s := ep.seen.Load()
		if now-s > e.forget {
			delete(e.m, k)
			freed = true
		} else if oldest == "" || s < at {
			oldest, at = k, s
		}
	}
	if !freed {
		delete(e.m, oldest)
	}
}
