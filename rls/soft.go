package rls

import (
	"context"
	"errors"

	"github.com/loadshed/loadshed/internal/overage"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// maxEpisodes bounds the keys one soft limit remembers episodes of, as
// ratelimit's Layer bounds them by default: past it, the episodes of keys
// long within their limit are forgotten first.
const maxEpisodes = 1 << 16

// softLimit is a soft limit's state, as ratelimit's Layer keeps it for a
// rule in soft mode: the overage's own in-memory store (Ceiling − limit
// units per period, ratelimit.Limit.Overage) and each key's episode,
// decided by the same rule (overage.Episodes.Verdict), one limit at a
// time.
type softLimit struct {
	enf      shed.Enforcement
	overage  *ratelimit.Memory
	clock    shed.Clock
	episodes overage.Episodes
}

// checkSoft reports what keeps e from being a limit's soft mode: the mode
// must be shed.Soft, and what the service has its own way for (shadow_mode
// for a dry run) or does not do (queueing: the service answers at once)
// must be unset.
func checkSoft(e *shed.Enforcement) error {
	switch {
	case e.Mode != shed.Soft:
		return errors.New("Limit.Soft.Mode must be shed.Soft")
	case e.DryRun:
		return errors.New("Limit.Soft.DryRun is not supported: set the descriptor's ShadowMode")
	case e.Action != shed.Reject:
		return errors.New("Limit.Soft.Action must be shed.Reject: the service does not queue")
	}
	return e.Validate()
}

func newSoftLimit(e *shed.Enforcement, l *Limit, clock shed.Clock) (*softLimit, error) {
	if err := checkSoft(e); err != nil {
		return nil, err
	}
	m, err := ratelimit.NewMemory(l.Algorithm, l.limit().Overage(e), ratelimit.MemoryConfig{Clock: clock})
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = shed.SystemClock
	}
	sl := &softLimit{enf: *e, overage: m, clock: clock}
	sl.episodes.Init(maxEpisodes, &sl.enf)
	return sl, nil
}

// admit decides a request the limit itself refused: the overage admits it
// when it has room and the key's episode allows it.
func (s *softLimit) admit(key string, cost int64) (ratelimit.Result, bool) {
	ctx := context.Background() // the overage is in memory: nothing to cancel
	r, err := s.overage.Allow(ctx, key, cost)
	within := err == nil && r.Allowed
	if s.episodes.Verdict(&s.enf, s.clock, within, key) == layerkit.AdmitOver {
		return r, true
	}
	if within {
		_ = s.overage.Refund(ctx, key, cost)
	}
	return r, false
}

func (s *softLimit) close() { s.overage.Close() }
