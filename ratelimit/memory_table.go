package ratelimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keyed maps key hashes to cells, in shards that are open-addressing tables
// holding each cell inline, next to its hash. A decision on a key already
// held is a hash, a probe and the cell's own CAS or lock: no lock shared
// across keys, and one cache miss where a map of pointers takes three.
//
// Readers take no lock. Writers (a new key, an eviction, the sweep) hold
// the shard's mutex. A slot, once given a key, belongs to that key for the
// table's life: a removed key's cell is marked dead and its slot left as a
// tombstone, never reused, so a reader that found a slot can trust it (a
// dead cell sends it to the locked path). When keys fill half a table it
// is rebuilt twice as large; when keys and tombstones fill three quarters
// of it, at the same size (so a shard at its cap, where every insert
// evicts, keeps the table of its live keys). A rebuild moves each live
// cell to a new table
// (moveTo marks the old one dead, atomically with decisions on it, so no
// decision is lost), and the new table is published.
type keyed[E any, C cell[E]] struct {
	p        params
	seed     maphash.Seed
	shift    uint // the hash's top bits pick the shard, its low bits the slot
	shardCap int
	shards   []shard[E]
}

type shard[E any] struct {
	mu    sync.Mutex
	tbl   atomic.Pointer[table[E]]
	live  int // keys in tbl; guarded by mu
	tombs int // removed keys' slots in tbl; guarded by mu
	_     [64 - 8 - 8 - 8 - 8]byte
}

type table[E any] struct {
	mask  uint64
	slots []slot[E]
}

// slot is a key's hash and its cell. The hash is stored after the cell is
// initialised, so a reader that sees it sees the cell ready.
type slot[E any] struct {
	h atomic.Uint64
	e E
}

// Reserved hash values; real hashes below 2 are moved up by 2.
const (
	emptySlot = 0
	tombSlot  = 1
)

const minTable = 8

func newKeyed[E any, C cell[E]](p params, maxKeys int) *keyed[E, C] {
	// Enough shards that parallel inserts rarely meet on one lock, but few
	// enough that each holds at least 64 keys: a full shard evicts from its
	// own keys, which must be a fair sample of the store's.
	n, bits := 1, uint(0)
	for n < 256 && n*2*64 <= maxKeys {
		n *= 2
		bits++
	}
	k := &keyed[E, C]{p: p, seed: maphash.MakeSeed(), shift: 64 - bits, shardCap: maxKeys / n,
		shards: make([]shard[E], n)}
	for i := range k.shards {
		k.shards[i].tbl.Store(&table[E]{mask: minTable - 1, slots: make([]slot[E], minTable)})
	}
	return k
}

func (k *keyed[E, C]) hash(key string) (*shard[E], uint64) {
	h := maphash.String(k.seed, key)
	if h < 2 {
		h += 2
	}
	if k.shift == 64 {
		return &k.shards[0], h
	}
	return &k.shards[h>>k.shift], h
}

// find returns h's cell in t, or nil. A table always has empty slots, so
// the probe ends.
func (t *table[E]) find(h uint64) *E {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch s.h.Load() {
		case h:
			return &s.e
		case emptySlot:
			return nil
		}
	}
}

func (k *keyed[E, C]) allow(key string, now, cost int64) Result {
	sh, h := k.hash(key)
	e := sh.tbl.Load().find(h)
	for {
		if e != nil {
			if r, ok := C(e).take(&k.p, now, cost); ok {
				return r
			}
		}
		e = k.insert(sh, h, now)
	}
}

func (k *keyed[E, C]) refund(key string, now, cost int64) {
	sh, h := k.hash(key)
	e := sh.tbl.Load().find(h)
	for e != nil && !C(e).giveBack(&k.p, now, cost) {
		sh.mu.Lock()
		e = sh.tbl.Load().find(h)
		sh.mu.Unlock()
	}
}

// insert returns h's live cell, adding one when there is none; it is also
// where a decision that met a dead cell waits for the shard's writer.
func (k *keyed[E, C]) insert(sh *shard[E], h uint64, now int64) *E {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tbl.Load()
	if e := t.find(h); e != nil {
		return e // live: cells in the current table die only with their slot
	}
	if sh.live >= k.shardCap {
		k.evict(sh, t, h, now)
	}
	switch size := len(t.slots); {
	case (sh.live+1)*2 > size:
		// Keys alone would fill half the table: grow.
		t = k.rebuild(sh, 2*size)
	case (sh.live+sh.tombs+1)*4 > 3*size:
		// Keys and tombstones fill three quarters: drop the tombstones,
		// keeping the size. A shard at its cap evicts a key (and leaves a
		// tombstone) per insert; growing here, as the keys' growth rule
		// would, doubled the table of every full shard. Keys fill at most
		// half the table, so at least a quarter of it fills with tombstones
		// between two rebuilds: a rebuild's cost, amortised, is at most
		// four moves per insert.
		t = k.rebuild(sh, size)
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.h.Load() == emptySlot {
			C(&s.e).init(&k.p, now)
			s.h.Store(h)
			sh.live++
			return &s.e
		}
	}
}

// rebuild moves the live cells to a new table of size slots and publishes
// it; mu is held.
func (k *keyed[E, C]) rebuild(sh *shard[E], size int) *table[E] {
	old := sh.tbl.Load()
	t := &table[E]{mask: uint64(size - 1), slots: make([]slot[E], size)}
	live := 0
	for i := range old.slots {
		s := &old.slots[i]
		h := s.h.Load()
		if h == emptySlot || h == tombSlot {
			continue
		}
		for j := h & t.mask; ; j = (j + 1) & t.mask {
			if d := &t.slots[j]; d.h.Load() == emptySlot {
				if C(&s.e).moveTo(&d.e) {
					d.h.Store(h)
					live++
				}
				break
			}
		}
	}
	sh.live, sh.tombs = live, 0
	sh.tbl.Store(t)
	return t
}

// remove retires slot s's cell, if not dead already, and tombstones it.
func (k *keyed[E, C]) remove(sh *shard[E], s *slot[E], now int64) {
	C(&s.e).retire(&k.p, now, 0, true)
	s.h.Store(tombSlot)
	sh.live--
	sh.tombs++
}

// evict removes one key from a full shard, looking from a position the new
// key's hash picks (a random one) at up to evictScan keys for one at rest,
// else evicting the first it saw; mu is held.
func (k *keyed[E, C]) evict(sh *shard[E], t *table[E], h uint64, now int64) {
	var first *slot[E]
	seen := 0
	for i, n := h&t.mask, 0; n < len(t.slots) && seen < evictScan; i, n = (i+1)&t.mask, n+1 {
		s := &t.slots[i]
		if x := s.h.Load(); x == emptySlot || x == tombSlot {
			continue
		}
		seen++
		if C(&s.e).retire(&k.p, now, 0, false) {
			k.remove(sh, s, now)
			return
		}
		if first == nil {
			first = s
		}
	}
	if first != nil {
		k.remove(sh, first, now)
	}
}

func (k *keyed[E, C]) sweep(now, idle int64) int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		t := sh.tbl.Load()
		for j := range t.slots {
			s := &t.slots[j]
			if x := s.h.Load(); x == emptySlot || x == tombSlot {
				continue
			}
			if C(&s.e).retire(&k.p, now, idle, false) {
				k.remove(sh, s, now)
				n++
			}
		}
		if len(t.slots) > minTable && sh.live*8 < len(t.slots) { // a burst of keys has gone
			k.rebuild(sh, max(minTable, nextPow2(sh.live*4)))
		}
		sh.mu.Unlock()
	}
	return n
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

func (k *keyed[E, C]) len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}
