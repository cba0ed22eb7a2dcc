package concurrency

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/loadshed/loadshed/shed/layerkit"
)

// dead marks a slot the sweeper has removed from its shard. It is far below
// any real count, so a CAS from a real count can never succeed on it, and an
// acquirer that reads it knows to look the key up again.
const dead = -1 << 62

// slot counts one key's units in flight. A lease points at its slot
// (through its guard, Lease.Ref), so a release needs no lookup.
type slot struct {
	n     atomic.Int64
	owner *Layer
	ep    layerkit.Episode // the key's soft-mode overage episode
	_     [32]byte         // keep hot counters of different keys off one cache line
}

const (
	numShards = 64 // a power of two
	// minSweepAt is the size at which a shard first sweeps its idle keys.
	minSweepAt = 512
)

type shard struct {
	mu sync.RWMutex
	m  map[string]*slot
	// sweepAt is the size at which the next insert sweeps idle keys first.
	// It doubles with the live keys after each sweep, so sweeping costs
	// amortised O(1) per insert and a shard holds at most about twice its
	// live keys.
	sweepAt int
	_       [40]byte
}

// keyMap is a sharded map of key → slot: lookups take one shard's read lock;
// a miss takes its write lock once to insert. Idle slots (count zero) are
// removed on insert when the shard has grown (see shard.sweepAt), never
// while an acquire holds them: removal CASes the count from 0 to dead, which
// fails if an acquire got there first, and an acquire that finds a dead slot
// looks the key up again.
type keyMap struct {
	seed   maphash.Seed
	owner  *Layer
	shards [numShards]shard
}

func newKeyMap(owner *Layer) *keyMap {
	km := &keyMap{seed: maphash.MakeSeed(), owner: owner}
	for i := range km.shards {
		km.shards[i].m = make(map[string]*slot)
		km.shards[i].sweepAt = minSweepAt
	}
	return km
}

func (km *keyMap) shard(key string) *shard {
	return &km.shards[maphash.String(km.seed, key)&(numShards-1)]
}

// get returns key's slot, creating it on a miss. The slot may be dead by the
// time the caller uses it; callers retry get when it is.
func (km *keyMap) get(key string) *slot {
	sh := km.shard(key)
	sh.mu.RLock()
	s := sh.m[key]
	sh.mu.RUnlock()
	if s != nil {
		return s
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s = sh.m[key]; s != nil {
		return s
	}
	if len(sh.m) >= sh.sweepAt {
		sh.sweepLocked()
		sh.sweepAt = max(minSweepAt, 2*len(sh.m))
	}
	s = &slot{owner: km.owner}
	sh.m[key] = s
	return s
}

// lookup returns key's slot without creating it.
func (km *keyMap) lookup(key string) *slot {
	sh := km.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[key]
}

func (sh *shard) sweepLocked() int {
	n := 0
	for k, s := range sh.m {
		if s.n.CompareAndSwap(0, dead) {
			delete(sh.m, k)
			n++
		}
	}
	return n
}

// sweep removes every idle key and reports how many it removed.
func (km *keyMap) sweep() int {
	n := 0
	for i := range km.shards {
		sh := &km.shards[i]
		sh.mu.Lock()
		n += sh.sweepLocked()
		sh.mu.Unlock()
	}
	return n
}

// len is how many keys are held, idle ones included.
func (km *keyMap) len() int {
	n := 0
	for i := range km.shards {
		sh := &km.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// total is the units in flight over every key.
func (km *keyMap) total() int64 {
	var n int64
	for i := range km.shards {
		sh := &km.shards[i]
		sh.mu.RLock()
		for _, s := range sh.m {
			if v := s.n.Load(); v > 0 {
				n += v
			}
		}
		sh.mu.RUnlock()
	}
	return n
}
