// Package redisx is the plumbing every Redis-backed layer (ratelimit,
// concurrency, fleet) shares, so that they validate, time out, run
// scripts, name keys, fail over, come back and divide a limit in an outage
// the same way:
//
//   - Options: the fields every layer's RedisConfig has (Prefix, Timeout,
//     ProbeInterval, ExpectedInstances), their one set of defaults and their
//     one validation, and CheckClient for the client itself.
//   - Deadlines: each round trip bounded by the layer's Timeout without a
//     timer per call.
//   - Script and RunAll: EVALSHA with a fallback to EVAL (script cache
//     flushed by a restart), alone or many in one pipeline.
//   - Keys: one key scheme. Every user key becomes a SHA-256 digest, so no
//     bytes a client sends can leave the layer's namespace or move the
//     Cluster hash tag.
//   - Gate and SharedGate: after an outage, one probe per ProbeInterval;
//     layers on one client share one gate, so a request waits for a dead
//     Redis once, not once per layer.
//   - Share and Presence: during an outage each instance enforces
//     Share(limit, n), n being ExpectedInstances when set, else the live
//     instances Presence last counted in Redis. Share rounds down, so the
//     fleet never admits more than the limit.
//   - Pipeline: a client hook that sends concurrent decisions' scripts
//     together, one write and one read per batch (loadshed serve's
//     -pipeline).
//
// docs/redis.md tells the whole story for users.
package redisx
