// Package shed is the spine of loadshed: the vocabulary every layer speaks
// and the Chain that runs layers in sequence. It speaks no HTTP: package
// shedhttp mounts a Chain as net/http and chi middleware, and Chain.Do runs
// one around any function (jobs, RPC).
//
// # Using a chain
//
// Build layers (ratelimit, concurrency, ...), put them in a Chain with
// NewChain, and run work through it:
//
//	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight}})
//	err = chain.Do(ctx, shed.Request{Key: "job:nightly", Priority: shed.Sheddable}, run)
//	var rej *shed.Rejection
//	if errors.As(err, &rej) { /* rej.Status, rej.RetryAfter, rej.Reason */ }
//
// A Request says who is asking (Key), for what (Route), how important it
// is (Priority: TestMode < Sheddable < Default < Critical; the zero value
// Unset resolves to the context's priority, WithPriority, else Default) and
// what it costs. Each layer answers one question: it grants a Lease or
// rejects with a *Rejection (429 StatusTooManyRequests: the client is over
// its own limit; 503 StatusServiceUnavailable: the service sheds load). A
// later layer's rejection releases what earlier layers granted, with
// Unused; admitted work releases its leases once it ends, with an Outcome,
// so adaptive layers learn only from real outcomes. Chain.Acquire and a
// Grant do the same without a function, for callers that hold work open.
//
// An Observer sees every decision and release as an Event (layer, policy,
// priority, route, kind, outcome: no key, so metrics stay bounded); shed
// imports neither Prometheus nor OpenTelemetry, adapters do. Layers whose
// state a dashboard shows report gauges (layerkit.GaugeReporter).
//
// # Writing a layer
//
// A layer implements Layer and, when its leases hold something, Releaser:
// Acquire returns NewLease(releaser), with Cost, Quota (the limit, for
// the RateLimit fields; Quota.Service for the service's own capacity,
// Quota.DryRun for a limit in dry run) and flags (Over, DryRun, Fallback,
// Waited), or a rejection built by Throttled or Shed, naming the layer.
// A layer that never reads Request.Route says so (RouteReader). The rest
// of the toolkit, which users of the layers need none of, is package
// shed/layerkit: the verdict of an Enforcement (Decide), soft-overage
// episodes, the priority wait queue, lease guards, and the gauges a layer
// reports for metrics.
//
// Package shed/shedtest has a manual clock, test layers and RunLayerSuite,
// the conformance suite every layer (ours and yours) should pass.
package shed
