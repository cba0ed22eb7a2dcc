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
// The middleware owns its layers: Close closes them (see Middleware).
// Config.Limit is the same with a key, route priorities, requests to skip
// or any other setting.
//
// It panics when the layers do not make a chain (none, a nil one, more
// than shed.MaxLayers), as MustNew does.
func Limit(layers ...shed.Layer) Middleware { return Config{}.Limit(layers...) }

// Limit is the package's Limit with c's settings: the one-liner grown by
// the options it needs, such as
//
//	r.Use(shedhttp.Config{
//		Key:        shedhttp.KeyHeader("X-API-Key"),                      // who is asking
//		Priorities: shedhttp.RoutePriorities{"/v1/reports/*": shed.Sheddable}, // shed first
//		Skip:       func(r *http.Request) bool { return r.URL.Path == "/healthz" },
//	}.Limit(
//		ratelimit.PerKey(100, time.Minute),
//		concurrency.PerKey(10),
//	))
//
// It is shed.NewChain of the layers, then MustNew of the chain and c, in
// one call; build them apart to share a chain between routers, to give
// the chain an observer, or to get errors instead of panics. It panics
// when the layers do not make a chain or c is invalid, as MustNew does.
func (c Config) Limit(layers ...shed.Layer) Middleware {
	chain, err := shed.NewChain(shed.Config{Layers: layers})
	if err != nil {
		panic(err)
	}
	mw, err := New(chain, c)
	if err != nil {
		panic(err)
	}
	return owning(chain, mw)
}

// Middleware is net/http middleware: what every constructor of the
// package, and config's Built and Live, return. It is a
// func(http.Handler) http.Handler, so chi's r.Use and r.With take it as it
// is.
type Middleware func(http.Handler) http.Handler

// Close closes what the middleware owns. Limit's (and Config.Limit's) owns
// its chain: Close closes its layers (shed.Chain.Close), the sweepers of
// in-memory stores, a worker layer's sampler, a fleet layer's tick. New's
// owns nothing (the chain stays the caller's), nor does config's (the
// Built or Live does), and Close returns nil. Call it when the handlers
// built from the middleware are done with, such as a test's or a reloaded
// router's; handlers still serving go on deciding, on state that is no
// longer swept or sampled.
func (m Middleware) Close() error {
	var c closeRequest
	m(&c)
	return c.err
}

// closeRequest is the handler Middleware.Close passes to its own
// function: instead of wrapping it, the function closes its chain. A
// Middleware is a func, so that it fits r.Use; this is how one reaches
// the chain it holds.
type closeRequest struct {
	http.Handler
	err error
}

// owning returns mw as a Middleware that closes chain on Close.
func owning(chain *shed.Chain, mw Middleware) Middleware {
	return func(next http.Handler) http.Handler {
		if c, ok := next.(*closeRequest); ok {
			c.err = chain.Close()
			return nil
		}
		return mw(next)
	}
}
