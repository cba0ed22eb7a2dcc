package concurrency

import (
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

var _ layerkit.ClientReporter = (*Layer)(nil)

// TopClients returns at most n clients with the largest shares of what
// the layer's queue granted recently, largest first
// (layerkit.ClientReporter): for a status page or a log line. Requests
// admitted with nobody waiting are not counted: the shares tell who gets
// the overall limit while it is contended. nil without a queue.
func (l *Layer) TopClients(n int) []layerkit.ClientShare {
	if l.queue == nil {
		return nil
	}
	return layerkit.TopClients(n, l.queue)
}

// reportFairness emits, per priority, the clients waiting and the fair
// share of one client (layerkit.GaugeClientsQueued, GaugeFairShare).
func (l *Layer) reportFairness(emit func(layerkit.Gauge)) {
	if l.queue == nil {
		return
	}
	for _, p := range shed.Priorities() {
		n, share := l.queue.FlowStats(p)
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeClientsQueued, Priority: p, Value: float64(n)})
		emit(layerkit.Gauge{Layer: l.name, Name: layerkit.GaugeFairShare, Priority: p, Value: share})
	}
}
