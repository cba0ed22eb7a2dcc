package ratelimit

// Queued returns how many requests wait in the layer's queues now
// (Enforcement.Action Queue); 0 without queues. A request counts once it
// is in its key's queue, with its deadline timer armed.
func (l *Layer) Queued() int {
	qs := l.queues
	if qs == nil || qs.waiting.Load() == 0 {
		return 0
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	n := 0
	for _, kq := range qs.m {
		n += kq.q.Len()
	}
	return n
}
