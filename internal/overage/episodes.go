// Package overage keeps the soft mode's per-key overage episodes, for the
// layers and services that let a key past its limit for a bounded time:
// ratelimit's Layer and rls's soft limits hold one Episodes each.
package overage

import (
	"sync"
	"sync/atomic"

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
