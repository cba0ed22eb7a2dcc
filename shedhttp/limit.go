package shedhttp

import (
	"net/http"

	"github.com/loadshed/loadshed/shed"
)

// Limit returns middleware that runs every request through layers, in
// order, keyed by the client's IP address (the peer: no proxy is trusted),
// with every other setting at its default: the shortest way to put layers
// on a router.
//
//	r.Use(shedhttp.Limit(
//		ratelimit.PerKey(100, time.Minute), // 100 requests a minute per client
//		concurrency.PerKey(10),             // 10 in flight per client
//	))
//
// It panics when the layers do not make a chain (none, a nil one, more
// than shed.MaxLayers), as MustNew does. Use shed.NewChain and New for
// keys, trusted proxies, route priorities and the rest.
func Limit(layers ...shed.Layer) func(http.Handler) http.Handler {
	chain, err := shed.NewChain(shed.Config{Layers: layers})
	if err != nil {
		panic(err)
	}
	return MustNew(chain, Config{})
}
