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
// With a key, route priorities or requests to skip, the same layers go to
// Config.Limit; with a chain of your own (an observer, shared between
// routers), to New:
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
