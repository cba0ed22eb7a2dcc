package telemetry

import (
	"sync"
	"sync/atomic"
)

// MaxSeries bounds a Cache. Labels are bounded sets, so a real service stays
// far below it; past it, handles are made afresh on every call (correct, but
// no longer free), so that a layer reporting unbounded policy names cannot
// grow memory without end.
const MaxSeries = 4096

// Cache maps label values to a backend's series handles. Reads are one
// atomic load and one map lookup, lock-free and allocation-free; a miss
// copies the map under a lock, which happens once per series.
type Cache[K comparable, V any] struct {
	m    atomic.Pointer[map[K]V]
	mu   sync.Mutex
	make func(K) V
}

// NewCache returns a cache that builds a missing entry with make.
func NewCache[K comparable, V any](make func(K) V) *Cache[K, V] {
	return &Cache[K, V]{make: make}
}

// Get returns k's entry, building it on the first call.
func (c *Cache[K, V]) Get(k K) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	return c.miss(k)
}

func (c *Cache[K, V]) miss(k K) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
		if len(*old) >= MaxSeries {
			return c.make(k)
		}
	}
	v := c.make(k)
	var n map[K]V
	if old == nil {
		n = map[K]V{k: v}
	} else {
		n = make(map[K]V, len(*old)+1)
		for ok, ov := range *old {
			n[ok] = ov
		}
		n[k] = v
	}
	c.m.Store(&n)
	return v
}

// Range calls f for every entry cached, in no order, until f returns false.
func (c *Cache[K, V]) Range(f func(K, V) bool) {
	m := c.m.Load()
	if m == nil {
		return
	}
	for k, v := range *m {
		if !f(k, v) {
			return
		}
	}
}
