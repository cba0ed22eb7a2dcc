package shedclient

import "unsafe"

// What the client remembers is bounded overall, whatever its servers
// send: every destination, every scope with the policies it was told
// of, and every spent policy is charged an estimate of the bytes it
// holds, and kept on one list in the order of last use. Past
// Config.MaxMemory the least recently used is forgotten first, a scope's
// spent policies and the scope before its destination (a destination is
// used whenever one of its scopes is). Forgetting costs at most a request
// the server refuses: the client learns again from its answer.

// memo is one thing the client remembers, a link of the list of last
// use. Client.mu guards it.
type memo struct {
	prev, next *memo
	size       int64
	self       forgettable
}

// listed reports whether m is still remembered.
func (m *memo) listed() bool { return m.next != nil }

// forgettable is what a memo stands for.
type forgettable interface {
	// forget drops what it remembers from its owner's maps and from the
	// list. Client.mu is held.
	forget(c *Client)
}

// recency is the list of what the client remembers, most recently used
// first, with the bytes it is charged. The zero value is unusable: call
// init.
type recency struct {
	root memo // root.next is the most recently used, root.prev the least
	used int64
}

func (r *recency) init() { r.root.next, r.root.prev = &r.root, &r.root }

func (r *recency) add(m *memo, self forgettable, size int64) {
	m.self, m.size = self, size
	r.used += size
	r.pushFront(m)
}

func (r *recency) pushFront(m *memo) {
	m.prev, m.next = &r.root, r.root.next
	m.prev.next, m.next.prev = m, m
}

func (r *recency) unlink(m *memo) {
	m.prev.next, m.next.prev = m.next, m.prev
	m.prev, m.next = nil, nil
}

// touch marks m used now.
func (r *recency) touch(m *memo) {
	if !m.listed() || r.root.next == m {
		return
	}
	r.unlink(m)
	r.pushFront(m)
}

func (r *recency) resize(m *memo, size int64) {
	if m.listed() {
		r.used += size - m.size
	}
	m.size = size
}

func (r *recency) remove(m *memo) {
	if !m.listed() {
		return
	}
	r.unlink(m)
	r.used -= m.size
}

// oldest is the least recently used memo; nil when there is none.
func (r *recency) oldest() *memo {
	if r.root.prev == &r.root {
		return nil
	}
	return r.root.prev
}

// trim forgets the least recently used until what is remembered is
// within MaxMemory. c.mu is held.
func (c *Client) trim() {
	for c.mem.used > c.cfg.MaxMemory {
		m := c.mem.oldest()
		if m == nil {
			return
		}
		m.self.forget(c)
	}
}

// The estimates are on the high side, so that the heap stays within the
// bound: a map entry is charged its key, its value and its share of the
// table as it grows, a string its header and its allocation's rounding
// (up to an eighth, for the sizes of partition keys).
const (
	mapEntryBytes = 64
	mapBytes      = 320 // an empty map, as a destination makes two
)

func stringBytes(s string) int64 { return 16 + int64(len(s)) + int64(len(s))/8 }

func destBytes(name string) int64 {
	return int64(unsafe.Sizeof(dest{})) + mapEntryBytes + 2*mapBytes + stringBytes(name)
}

func (sc *scope) bytes() int64 {
	n := int64(unsafe.Sizeof(scope{})) + mapEntryBytes + stringBytes(sc.key) + int64(cap(sc.ids))*int64(unsafe.Sizeof(""))
	for _, id := range sc.ids {
		n += stringBytes(id)
	}
	return n
}

func spentBytes(id string) int64 {
	return int64(unsafe.Sizeof(spentPolicy{})) + mapEntryBytes + stringBytes(id)
}
