package layerkit

import "github.com/loadshed/loadshed/shed"

// ClientShare is what one client (a request's Key) holds of a layer's
// capacity now: for a status page or a log line, never for metric labels,
// whose cardinality must stay bounded.
type ClientShare struct {
	// Key is the client's key as the layer saw it. Whoever shows it to a
	// person masks it unless told otherwise.
	Key string
	// Priority is the priority level the share is of.
	Priority shed.Priority
	// InFlight is the units the client holds now.
	InFlight int64
	// Queued is how many of the client's requests wait now.
	Queued int
	// Share is the client's part of the capacity served recently, 0..1.
	Share float64
}

// ClientReporter is implemented by layers that share their capacity among
// clients. TopClients returns at most n clients with the largest shares,
// largest first; it is called by a status page or a logger, never on the
// request path.
type ClientReporter interface {
	TopClients(n int) []ClientShare
}
