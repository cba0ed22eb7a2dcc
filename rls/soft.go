package rls

import (
	"context"
	"sync"
	"time"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Soft is a limit's soft mode: past the limit, a key may go Overage
// further for at most OverageFor per episode (layerkit.Episode), and the
// status says OK while it does; the event is marked Over.
type Soft struct {
	// Overage is how far past the limit, as a fraction (default 0.1).
	Overage float64
	// OverageFor is the longest one episode lasts (default 30s).
	OverageFor time.Duration
	// OverageCooldown is how long the limit must go unexceeded before a
	// new episode may begin (default OverageFor).
	OverageCooldown time.Duration
}

func (s *Soft) enforcement() *shed.Enforcement {
	return &shed.Enforcement{Mode: shed.Soft, Overage: s.Overage, OverageFor: s.OverageFor, OverageCooldown: s.OverageCooldown}
}

// maxEpisodes bounds the keys one soft limit remembers episodes of, per
// generation: when one fills, the previous generation is forgotten, so
// that only keys not over their limit for a whole generation lose theirs.
const maxEpisodes = 1 << 16

// softLimit is a soft limit's state: the overage's own in-memory store
// (Ceiling − limit units per period) and each key's episode.
type softLimit struct {
	enf     *shed.Enforcement
	overage ratelimit.Store
	clock   shed.Clock

	mu        sync.Mutex
	cur, prev map[string]*layerkit.Episode
}

func newSoftLimit(s *Soft, l *Limit, clock shed.Clock) (*softLimit, error) {
	enf := s.enforcement()
	if err := enf.Validate(); err != nil {
		return nil, err
	}
	m, err := ratelimit.NewMemory(l.Algorithm, l.limit().Overage(enf), ratelimit.MemoryConfig{Clock: clock})
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = shed.SystemClock
	}
	return &softLimit{enf: enf, overage: m, clock: clock, cur: map[string]*layerkit.Episode{}}, nil
}

func (s *softLimit) episode(key string) *layerkit.Episode {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ep, ok := s.cur[key]; ok {
		return ep
	}
	ep, ok := s.prev[key]
	if !ok {
		ep = &layerkit.Episode{}
	}
	if len(s.cur) >= maxEpisodes {
		s.prev, s.cur = s.cur, map[string]*layerkit.Episode{}
	}
	s.cur[key] = ep
	return ep
}

// admit decides a request the limit itself refused: the overage admits it
// when it has room and the key's episode allows it.
func (s *softLimit) admit(key string, cost int64) (ratelimit.Result, bool) {
	ctx := context.Background() // the overage is in memory: nothing to cancel
	r, err := s.overage.Allow(ctx, key, cost)
	within := err == nil && r.Allowed
	v := layerkit.DecideOver(s.enf, s.clock.Now(), within, s.episode(key))
	if v == layerkit.AdmitOver {
		return r, true
	}
	if within {
		_ = s.overage.Refund(ctx, key, cost)
	}
	return r, false
}

func (s *softLimit) close() {
	if c, ok := s.overage.(interface{ Close() error }); ok {
		c.Close()
	}
}
