// Package shedhttp runs every HTTP request through a shed.Chain: net/http
// middleware that works with any router taking func(http.Handler)
// http.Handler and knows chi's route patterns.
//
//	r := chi.NewRouter()
//	r.Use(shedhttp.Limit(
//		ratelimit.PerKey(100, time.Minute), // 100 requests a minute per client (by IP)
//		concurrency.PerKey(10),             // 10 in flight per client
//	))
//
// Which constructor: every one returns a Middleware, and the rule is where
// the layers come from.
//
//   - Layers, default settings: Limit.
//   - Layers and settings (a key, route priorities, requests to skip):
//     Config.Limit.
//   - A shed.Chain of your own (an observer, one chain for several
//     routers, an error rather than a panic on a bad Config): New, or
//     MustNew for a Config that is a literal of the program.
//   - A configuration file: config.Open, then Live.Middleware.
//
// Limit and Config.Limit own the chain they build (Middleware.Close closes
// it); New leaves the chain to its caller.
//
//	r.Use(shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key")}.Limit(layers...))
//	mw, err := shedhttp.New(chain, shedhttp.Config{Key: shedhttp.KeyHeader("X-API-Key")})
//
// For each request it resolves who is asking (Key; the client IP, read from
// X-Forwarded-For or Forwarded only through trusted proxies, by default),
// the route pattern and its priority (Priorities), the cost and the
// deadline; runs the chain; and answers a rejection with its status,
// Retry-After, the RateLimit fields and a problem document (RFC 9457), or
// sets the RateLimit fields of an admitted request and calls the handler.
package shedhttp
