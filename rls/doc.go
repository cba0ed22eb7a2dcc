// Package rls is loadshed as a rate limit service: Envoy's Rate Limit
// Service v3 (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit),
// a drop-in for envoyproxy/ratelimit, answered by the ratelimit package's
// stores. `loadshed serve` runs it; a program may embed a Server in its own
// grpc.Server.
//
// # Rules
//
// A Domain is a tree of Descriptors, as envoyproxy/ratelimit's files write
// it; LoadEnvoyConfig reads those files as they are (a directory of them,
// one domain each), FromFile takes the ratelimit sections of loadshed's own
// file, and Load picks between the two: a file whose top level has a
// domain or descriptors and no layers is envoyproxy/ratelimit's, so that
// one missing its domain is refused as envoyproxy/ratelimit refuses it.
//
// A request descriptor is matched as envoyproxy/ratelimit matches it:
// entry by entry, its key and value first, then the wildcards of that
// level in the file's order, then its key alone (one count per distinct
// value). A wildcard is a '*' anywhere in an entry's name, key_value as
// envoyproxy/ratelimit forms it ("/v1/*/reports", "*.json", "svc*ep*rpc"),
// each '*' any run of characters, and the request's whole key_value is
// matched against it (so a value "" is matched by "*" before the key
// alone). The rule applies when the descriptor's last entry reaches a
// descriptor with a limit. Counts are kept per limit and per the
// descriptor's full list of keys and values, except that an entry matched
// by a wildcard with share_threshold is counted under the pattern: every
// value it matches shares one count.
//
// # Metrics
//
// Each decision is an event whose Policy names the rule: the limit's name,
// else its path in the tree ("key_value.key"), as envoyproxy/ratelimit
// names its stats without the domain. With detailed_metric the request's
// keys and values follow the rule's path ("<path>.key_value"); with
// value_to_metric, an entry matched by its key alone or by a wildcard takes
// the request's value in the path ("route_draw.user"). An entry counted
// under a shared pattern is named by the pattern in both. The names a rule
// takes from requests are bounded by MaxDetailedValues.
//
// # Reading files
//
// Every file is read within config.Limits (config's defaults: 4 MiB, 100
// levels of nesting, 200,000 values and 20,000 descriptors, aliases
// expanded; raised by LoadLimited, Config.Limits and loadshed serve's
// -config-max-* flags): a file past them is refused with its line and
// column, at a cost of a few MB, so that a billion-laughs file or one
// nested ten thousand deep cannot take the service's memory, and no file
// can make the YAML library's panics end the process. A value a field
// cannot hold exactly (requests_per_unit: 2.5 or 5000000000, value: 010
// that YAML reads as the number 8) is refused at its position rather than
// served as another. A refused reload keeps the running rules, logs one
// line (the first twenty errors, at most 4 KB) and is reported by
// LastReload (and by loadshed serve's loadshed_rls_last_reload_success and
// _timestamp_seconds).
//
// # Answers
//
// Each descriptor gets a status (code, current_limit, limit_remaining,
// duration_until_reset); the overall code is OVER_LIMIT when any status is,
// except for quotas: a descriptor whose rule has quota_mode (every
// descriptor, with Config.QuotaMode) makes the overall code OVER_LIMIT
// only when every quota of the request is over, so that a request passes
// while any of its quotas has room; its own status still says OVER_LIMIT.
// hits_addend (the request's, or a descriptor's own, which may be 0 to
// check without counting: ratelimit.Peek, on Redis one round trip that
// writes nothing) is the cost; is_negative_hits gives units back.
// shadow_mode decides and records but answers OK; unlimited answers OK
// with no limit; a limit named in another matched limit's replaces is
// skipped; requests_per_unit 0 rejects everything; a descriptor's own
// limit (the request's override) is a fixed window of that limit, in a
// known domain, for up to MaxOverrides distinct limits. An unknown
// domain, or a descriptor no rule matches, is OK without a limit, as
// there. An empty domain or descriptor list, or a request past Config's
// bounds (the number of descriptors and entries, the length of a key or
// value) or not UTF-8, is INVALID_ARGUMENT (over gRPC, invalid UTF-8 never
// gets that far: gRPC's decoder refuses the message as INTERNAL; over JSON
// it is a 400).
//
// With Config.RateLimitHeaders the tightest limit's RateLimit and
// RateLimit-Policy fields go into response_headers_to_add. With
// Config.ResponseDynamicMetadata the response's dynamic_metadata holds the
// domain, each descriptor (its entries as "key=value", its own limit and
// hits_addend), the request's hits_addend, and under "metadata" the
// metadata of the rules the request passed (neither over nor unlimited),
// merged in its order: maps merge, and of two other values under one name
// the first stays.
//
// # Beyond envoyproxy/ratelimit
//
// A limit may use any of the five algorithms (envoyproxy/ratelimit's files
// default to fixed-window, the only one it has), any window (unit with
// unit_multiplier, or a period such as "90s"), a burst, soft mode (mode:
// soft with overage, overage_for and overage_cooldown: past the limit, a
// key may go the overage further for a bounded time per episode, answered
// OK and reported as over in events; the overage and the episodes are
// each instance's own, in memory), and a descriptor
// may hold several limits (rate_limits: a list): a request must pass all,
// a rejected one is not charged by the others, and the status reports the
// rejecting limit or else the one with the least remaining.
//
// Several limits are decided as ratelimit's Layer decides several rules,
// with the same stores, overage, episodes and verdict on a request over a
// soft limit, but limit by limit, since each limit has its own mode where
// the Layer has one for all its rules: a soft limit's episode decides
// that limit alone, where the Layer admits a
// request over several soft rules only if all their episodes allow it; a
// limit in shadow mode lets the limits after it count, where the Layer's
// dry run charges none; and a status reports its limit's own
// duration_until_reset, the window's reset as envoyproxy/ratelimit gives
// it, where the Layer's quotas give when the next unit comes back.
//
// Counts live in memory, or in Redis (single node, Sentinel or Cluster)
// with the library's fallback to a local share when Redis is slow or
// down: the gateway never sees an error for it, so Envoy's
// failure_mode_deny keeps its meaning for a service that is really gone.
// Reload swaps the rules whole; limits that did not change keep their
// counts, and rules that do not compile are refused while the running ones
// keep serving.
//
// # Differences from envoyproxy/ratelimit
//
// A rejected request is not counted (envoyproxy/ratelimit increments on
// every hit, so its counter runs past the limit); with hits_addend 1 the
// answers are the same, request by request. limit_remaining on OVER_LIMIT
// is what is still there (0 with unit costs; with a larger hits_addend the
// units a smaller request could still take), where envoyproxy/ratelimit
// always says 0. A check (hits_addend 0) is over when nothing remains,
// where envoyproxy/ratelimit says over only once its counter is past the
// limit.
//
// Every field of envoyproxy/ratelimit's files has its effect; its
// settings QUOTA_MODE and RESPONSE_DYNAMIC_METADATA are
// Config.QuotaMode and Config.ResponseDynamicMetadata. Its other source of
// rules, an xDS server (whose protocol also carries metadata), does not
// apply: the rules are files. The "limit" of a descriptor in the dynamic
// metadata is the limit's protobuf text, whose spacing protobuf's Go
// library varies on purpose, there as here: read it as text format, not
// byte for byte. Where two rules a request passed hold a map under one
// name in their metadata, envoyproxy/ratelimit merges the second into the
// first rule's own map, so that rule's later responses keep the other's
// fields; rls merges into a copy, each response from its own rules.
//
// rls answers as envoyproxy/ratelimit's current source does. Its older
// versions (among them builds of January 2026) answer otherwise in three
// ways: before March 2026 a quota that is over was answered OK, without
// duration_until_reset, and never made the overall code OVER_LIMIT;
// before April 2026 dynamic_metadata also held quotaModeEnabled and
// quotaModeViolations, and no rule's metadata (the field was refused);
// before March 2026 only a trailing '*' was a wildcard.
package rls
