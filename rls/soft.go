package rls

import (
	"context"
	"time"

	"github.com/loadshed/loadshed/internal/overage"
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

// maxEpisodes bounds the keys one soft limit remembers episodes of, as
// ratelimit's Layer bounds them by default: past it, the episodes of keys
// long within their limit are forgotten first.
const maxEpisodes = 1 << 16

// softLimit is a soft limit's state, as ratelimit's Layer keeps it for a
// rule in soft mode: the overage's own in-memory store (Ceiling − limit
// units per period, ratelimit.Limit.Overage) and each key's episode.
type softLimit struct {
	enf      *shed.Enforcement
	overage  ratelimit.Store
	clock    shed.Clock
	episodes overage.Episodes
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
	sl := &softLimit{enf: enf, overage: m, clock: clock}
	sl.episodes.Init(maxEpisodes, enf)
	return sl, nil
}

// admit decides a request the limit itself refused: the overage admits it
// when it has room and the key's episode allows it.
func (s *softLimit) admit(key string, cost int64) (ratelimit.Result, bool) {
	ctx := context.Background() // the overage is in memory: nothing to cancel
	r, err := s.overage.Allow(ctx, key, cost)
	within := err == nil && r.Allowed
	now := s.clock.Now()
	v := layerkit.DecideOver(s.enf, now, within, s.episodes.Get(key, now.UnixNano()))
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
