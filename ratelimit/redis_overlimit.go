package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// overLimitCache remembers keys Redis found with no unit left, until the
// instant one unit is back by Redis' own figures, so that a client hammering
// past its limit costs no round trip (as envoyproxy/ratelimit's local cache
// does). It errs towards refusing: units another instance refunds meanwhile
// are not seen until the entry ends.
type overLimitCache struct {
	max int
	n   atomic.Int64 // entries, so the common empty case takes no lock
	// epoch moves at every forget: an answer Redis gave before a refund
	// (read before the round trip) is not cached after it, or a denial
	// racing a refund would keep the key refused while Redis has units.
	epoch atomic.Uint64

	mu sync.Mutex
	m  map[string]overEntry
}

type overEntry struct {
	until int64 // local clock, Unix ns: one unit is back
	reset int64 // local clock, Unix ns: the whole limit is back
}

func newOverLimitCache(max int) *overLimitCache {
	return &overLimitCache{max: max, m: make(map[string]overEntry)}
}

// check answers for key from the cache when it holds an entry still in
// force. RetryAfter is when a single unit is back: a lower bound for a
// larger cost.
func (c *overLimitCache) check(key string, now time.Time, limit int64) (Result, bool) {
	if c.n.Load() == 0 {
		return Result{}, false
	}
	t := now.UnixNano()
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && t >= e.until {
		delete(c.m, key)
		c.n.Store(int64(len(c.m)))
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return Result{}, false
	}
	return Result{Limit: limit, RetryAfter: time.Duration(e.until - t), ResetAfter: time.Duration(max(e.reset-t, 0))}, true
}

// add caches key as over its limit, unless a forget came since epoch
// (read before the round trip whose answer this is).
func (c *overLimitCache) add(key string, now time.Time, retry1, reset time.Duration, epoch uint64) {
	t := now.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch.Load() != epoch {
		return
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		c.evict(t)
	}
	c.m[key] = overEntry{until: t + int64(retry1), reset: t + int64(reset)}
	c.n.Store(int64(len(c.m)))
}

// evict makes room for one entry: the ended ones among the first few it
// meets, or else an arbitrary one. The caller holds mu.
func (c *overLimitCache) evict(now int64) {
	const scan = 16
	i := 0
	var victim string
	for k, e := range c.m {
		if now >= e.until {
			delete(c.m, k)
			return
		}
		if i == 0 {
			victim = k
		}
		if i++; i == scan {
			break
		}
	}
	delete(c.m, victim)
}

func (c *overLimitCache) forget(key string) {
	c.epoch.Add(1)
	if c.n.Load() == 0 {
		return
	}
	c.mu.Lock()
	delete(c.m, key)
	c.n.Store(int64(len(c.m)))
	c.mu.Unlock()
}

func (c *overLimitCache) len() int { return int(c.n.Load()) }
