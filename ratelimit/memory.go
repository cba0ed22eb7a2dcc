package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
)

// DefaultMaxKeys is MemoryConfig.MaxKeys when it is zero.
const DefaultMaxKeys = 1 << 20

// MemoryConfig configures an in-memory store. The zero value is ready to use.
type MemoryConfig struct {
	// MaxKeys bounds how many keys the store holds (default DefaultMaxKeys).
	// Keys are spread over shards, each holding at most its share. A new key
	// arriving at a full shard evicts a key of that shard: one at rest (whose
	// state is that of a new key, so nothing is lost) if it finds one among
	// the few it looks at, otherwise an arbitrary one, whose limit then
	// starts over. The store thus stays bounded and keeps serving new
	// clients; size MaxKeys above the number of clients active within one
	// Period so that busy keys are never evicted.
	MaxKeys int
	// IdleAfter is how long a key must have been at rest (no units in use,
	// exactly as a new key) before the sweeper removes it (default Period,
	// within [1s, 5m]). The sweeper runs every IdleAfter. Removing a key at
	// rest changes no decision.
	IdleAfter time.Duration
	// Clock is where the store reads time and arms its sweeper (default
	// shed.SystemClock, read through the monotonic clock).
	Clock shed.Clock
}

// Memory is the in-memory Store for one algorithm and one limit. It is
// safe for concurrent use. Decisions on keys it already holds take no lock
// shared across keys and allocate nothing. Call Close to stop its sweeper.
//
// Keys are held as 64-bit hashes (hash/maphash, seeded at random per
// store), not as strings: a key of any length costs the same, and a lookup
// touches no key bytes but the caller's. Two keys share a state only if
// their hashes collide, with odds of about n²/2⁶⁵ among n live keys (one in
// 36 million for a million keys), and the seed is secret, so no client can
// aim for a collision.
type Memory struct {
	alg     Algorithm
	limit   Limit
	maxCost int64
	core    memCore

	clock    shed.Clock
	mono     bool // read time as wallBase + time.Since(monoBase)
	wallBase int64
	monoBase time.Time

	idle    int64
	sweepMu sync.Mutex
	timer   shed.Timer
	closed  bool
}

// memCore is one algorithm's keyed state.
type memCore interface {
	allow(key string, now, cost int64) Result
	refund(key string, now, cost int64)
	sweep(now, idle int64) int
	len() int
}

// NewMemory returns an in-memory limiter enforcing limit with alg.
func NewMemory(alg Algorithm, limit Limit, cfg MemoryConfig) (*Memory, error) {
	if err := limit.ValidateFor(alg); err != nil {
		return nil, err
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("ratelimit: MemoryConfig.MaxKeys must not be negative, got %d", cfg.MaxKeys)
	}
	if cfg.IdleAfter < 0 {
		return nil, fmt.Errorf("ratelimit: MemoryConfig.IdleAfter must not be negative, got %v", cfg.IdleAfter)
	}
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	idle := cfg.IdleAfter
	if idle == 0 {
		idle = min(max(limit.Period, time.Second), 5*time.Minute)
	}
	p := newParams(limit)
	var core memCore
	switch alg {
	case TokenBucket, LeakyBucket:
		core = newKeyed[gcraCell](p, maxKeys)
	case FixedWindow:
		core = newKeyed[fixedCell](p, maxKeys)
	case SlidingWindow:
		core = newKeyed[slidingCell](p, maxKeys)
	case SlidingLog:
		core = newKeyed[logCell](p, maxKeys)
	}
	m := &Memory{alg: alg, limit: limit, maxCost: limit.MaxCost(alg), core: core, clock: clockx.Or(cfg.Clock), idle: int64(idle)}
	if m.clock == shed.SystemClock {
		m.mono = true
		m.monoBase = time.Now()
		m.wallBase = m.monoBase.UnixNano()
	}
	// Under sweepMu: the first tick may fire, and re-arm the timer, before
	// this assignment would otherwise be visible to it.
	m.sweepMu.Lock()
	m.timer = m.clock.AfterFunc(idle, m.sweepTick)
	m.sweepMu.Unlock()
	return m, nil
}

// now reads the clock as Unix nanoseconds. With the system clock it pays
// one monotonic read, and a wall-clock step cannot move it backwards.
func (m *Memory) now() int64 {
	if m.mono {
		return m.wallBase + int64(time.Since(m.monoBase))
	}
	return m.clock.Now().UnixNano()
}

// Allow takes cost units for key if the limit allows it. It never blocks
// and ignores ctx.
func (m *Memory) Allow(_ context.Context, key string, cost int64) (Result, error) {
	if key == "" || cost < 1 || cost > m.maxCost { // kept inline: checkRequest is not
		return Result{Limit: m.limit.Quantity}, checkRequest(m.limit, m.alg, key, cost)
	}
	return m.core.allow(key, m.now(), cost), nil
}

// Refund gives back cost units taken for key: the bucket's tokens, the
// window's count, the log's newest entries. Units taken in a window that has
// since ended are not given back.
func (m *Memory) Refund(_ context.Context, key string, cost int64) error {
	if err := checkRequest(m.limit, m.alg, key, cost); err != nil {
		return err
	}
	m.core.refund(key, m.now(), cost)
	return nil
}

// Limit returns the limit enforced.
func (m *Memory) Limit() Limit { return m.limit }

// Algorithm returns the algorithm used.
func (m *Memory) Algorithm() Algorithm { return m.alg }

// Len returns how many keys the store holds.
func (m *Memory) Len() int { return m.core.len() }

// Close stops the sweeper. The store still answers afterwards, but no
// longer removes idle keys. It always returns nil.
func (m *Memory) Close() error {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
	return nil
}

// Sweep removes the keys that have been at rest for IdleAfter, as the
// sweeper does, and reports how many it removed.
func (m *Memory) Sweep() int {
	return m.core.sweep(m.now(), m.idle)
}

func (m *Memory) sweepTick() {
	m.Sweep()
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	if !m.closed {
		m.timer = m.clock.AfterFunc(time.Duration(m.idle), m.sweepTick)
	}
}

// params is a limit in the integers the cells compute with.
type params struct {
	q      int64 // Quantity
	period int64 // Period, ns
	t      int64 // emission interval, ns (buckets)
	tau    int64 // burst × t, ns (buckets)
}

func newParams(l Limit) params {
	p := params{q: l.Quantity, period: int64(l.Period), t: int64(l.Interval())}
	p.tau = l.BurstOrQuantity() * p.t
	return p
}

// cell is one key's state under one algorithm. Its methods synchronise
// themselves (a CAS on one word, or a lock of the cell's own).
type cell[E any] interface {
	*E
	// init readies a new cell at now.
	init(p *params, now int64)
	// take decides cost units at now. ok is false when the cell was retired
	// by the sweeper or an eviction: the caller looks the key up again.
	take(p *params, now, cost int64) (r Result, ok bool)
	// giveBack refunds cost units; false when the cell was retired.
	giveBack(p *params, now, cost int64) bool
	// retire marks the cell dead when force is set or it has been at rest
	// since now-idle, and reports whether it did. A dead cell answers no
	// more decisions, so a decision racing with its removal is retried on
	// the key's new cell instead of being lost.
	retire(p *params, now, idle int64, force bool) bool
	// moveTo copies the cell's state into dst, a new cell no other
	// goroutine sees yet, and marks the cell dead, atomically with respect
	// to take; false when it was dead already.
	moveTo(dst *E) bool
}

// evictScan is how many keys of a full shard an insert looks at for one at
// rest before evicting an arbitrary one: bounded work under the shard lock.
const evictScan = 8

// dead marks a retired cell in its time word.
const dead = math.MinInt64

// floorTo returns the start of the Period-long window holding now, windows
// aligned on the Unix epoch (so hosts and Redis agree on them).
func floorTo(now, period int64) int64 {
	r := now % period
	if r < 0 {
		r += period
	}
	return now - r
}
