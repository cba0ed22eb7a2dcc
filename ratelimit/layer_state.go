package ratelimit

// Queued returns how many requests wait in the layer's queues now
// (Enforcement.Action Queue); 0 without queues.
func (l *Layer) Queued() int {
	if l.queues == nil {
		return 0
	}
	return int(l.queues.waiting.Load())
}
