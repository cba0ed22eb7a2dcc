package config

import (
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// File is the whole defence, as one file holds it. Parse reads one from
// YAML or JSON; a program may also fill one in Go and hand it to Build.
// Every field's comment states its default; the names in backquotes are
// the file's.
type File struct {
	// Redis is the shared store, for layers with `store: redis`. Optional.
	Redis *Redis `yaml:"redis"`
	// HTTP says how the middleware turns an HTTP request into a shed
	// request: whose it is, and how important its route is.
	HTTP HTTP `yaml:"http"`
	// GRPC says how the gRPC interceptors turn a call into a shed request.
	GRPC GRPC `yaml:"grpc"`
	// Layers run in this order, each a section with exactly one of
	// `ratelimit`, `concurrency`, `fleet`, `worker`. Required: at least one.
	Layers []Layer `yaml:"layers"`

	unparsed bool // the file did not parse: nothing to check
	warnings Errors
}

// Warnings returns the settings of the file that are valid but almost
// certainly not what was meant (a per_key above the limit, which never
// binds), each placed like an error. Parse and Load succeed with them;
// `loadshed check` prints them.
func (f *File) Warnings() Errors { return f.warnings }

// Redis is the connection to the shared store, made with go-redis's
// UniversalClient: one address is a single node, several a Cluster, and
// MasterName a Sentinel group. A single node's client sends the scripts of
// concurrent decisions in batches (one write and one read for many) and,
// so that no batch runs twice, never retries a command.
type Redis struct {
	// Addr is one "host:port". Addr or Addrs is required.
	Addr string `yaml:"addr"`
	// Addrs are several "host:port": a Cluster, or Sentinels with MasterName.
	Addrs []string `yaml:"addrs"`
	// MasterName, with Addrs, names the Sentinel master group.
	MasterName string `yaml:"master_name"`
	// Username for Redis ACLs (default none).
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable that holds the password,
	// so that the file itself holds no secret (default none).
	PasswordEnv string `yaml:"password_env"`
	// DB selects the database on a single node (default 0).
	DB int `yaml:"db"`
	// DialTimeout bounds connecting (default 1s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout and WriteTimeout bound each socket operation (default
	// 200ms); the layers' own Timeout, shorter, usually ends a call first.
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// PoolSize is the most connections per node (default go-redis's: 10 per CPU).
	PoolSize int `yaml:"pool_size"`
	// Timeout bounds one decision's round trip in every Redis-backed layer
	// (default 50ms); past it the layer decides from its local share.
	Timeout time.Duration `yaml:"timeout"`
	// ProbeInterval is how often a layer that fell back tries Redis again
	// (default the layer's: 500ms for rate limits, 250ms for concurrency).
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// ExpectedInstances is how many processes share the limits (default 1):
	// while Redis is down each admits its share, limit ÷ instances.
	ExpectedInstances int `yaml:"expected_instances"`
}

// HTTP configures the middleware (shedhttp.Config).
type HTTP struct {
	// Key says whose a request is (default: the client IP).
	Key Key `yaml:"key"`
	// TrustedProxies are the addresses or CIDR prefixes whose
	// X-Forwarded-For / Forwarded the client IP is read through (default
	// none: the peer's address).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ClientIPHeader, when set, is the one header a trusted proxy names the
	// client in ("X-Real-IP"); default X-Forwarded-For and Forwarded.
	ClientIPHeader string `yaml:"client_ip_header"`
	// OnKeyError is what happens to a request without a key:
	// fallback-client-ip (default), shared, reject.
	OnKeyError shedhttp.KeyErrorPolicy `yaml:"on_key_error"`
	// MaxKeyLength is the longest key accepted (default 1024).
	MaxKeyLength int `yaml:"max_key_length"`
	// DefaultPriority is the priority of routes Priorities does not name
	// (default: default).
	DefaultPriority shed.Priority `yaml:"default_priority"`
	// Priorities annotates routes: "POST /v1/charges": critical,
	// "/v1/reports/*": sheddable (see shedhttp.RoutePriorities).
	Priorities map[string]shed.Priority `yaml:"priorities"`
	// LegacyHeaders adds X-RateLimit-Limit/-Remaining/-Reset (default off).
	LegacyHeaders bool `yaml:"legacy_headers"`
}

// Key says where a request's key comes from.
type Key struct {
	// From is client-ip (default), header or bearer.
	From KeySource `yaml:"from"`
	// Header names the header for From: header ("X-API-Key").
	Header string `yaml:"header"`
	// Hash keeps a digest of the key instead of the key itself, so that no
	// secret lands in Redis or in memory dumps (default off).
	Hash bool `yaml:"hash"`
}

// Layer is one layer of the chain: exactly one field is set.
type Layer struct {
	RateLimit   *RateLimit   `yaml:"ratelimit"`
	Concurrency *Concurrency `yaml:"concurrency"`
	Fleet       *Fleet       `yaml:"fleet"`
	Worker      *Worker      `yaml:"worker"`
}

// Enforcement is a layer's mode, dry run and action (shed.Enforcement).
type Enforcement struct {
	// Mode is hard (default), soft or elastic. Elastic needs a headroom
	// signal: the file's worker layer, or Options.Headroom.
	Mode shed.Mode `yaml:"mode"`
	// DryRun decides and records, never rejects (default off).
	DryRun bool `yaml:"dry_run"`
	// Action on "over": reject (default) or queue.
	Action shed.Action `yaml:"action"`
	// Overage is how far soft and elastic go above the limit, as a
	// fraction (default 0.1).
	Overage float64 `yaml:"overage"`
	// OverageFor is the longest a soft overage lasts (default 30s).
	OverageFor time.Duration `yaml:"overage_for"`
	// OverageCooldown is how long a soft limit must go unexceeded before a
	// new overage episode may begin (default OverageFor).
	OverageCooldown time.Duration `yaml:"overage_cooldown"`
	// MinHeadroom is the least headroom at which elastic still allows the
	// overage (unset: 0.2; 0 is allowed and means "while not saturated").
	MinHeadroom *float64 `yaml:"min_headroom"`
	// Queue bounds the wait; required when Action is queue.
	Queue Queue `yaml:"queue"`
}

// Queue bounds a wait queue (shed.QueueConfig).
type Queue struct {
	// MaxLength is the most requests waiting at once. Required with queue.
	MaxLength int `yaml:"max_length"`
	// MaxWait is the longest one waits. Required with queue.
	MaxWait time.Duration `yaml:"max_wait"`
	// AdaptiveLIFO serves the newest first under sustained overload
	// (default off).
	AdaptiveLIFO bool `yaml:"adaptive_lifo"`
}

// RateLimit is a request-rate layer, its rules written as Lyft's
// envoyproxy/ratelimit writes them: a domain and a tree of descriptors,
// each leaf with a rate_limit.
type RateLimit struct {
	// Name tells this layer apart in events and metrics (default
	// "ratelimit"). Rules in shadow mode run in a layer of their own, named
	// Name + "-shadow".
	Name        string `yaml:"name"`
	Enforcement `yaml:",inline"`
	// Domain groups the rules, as Lyft's domain does (default none).
	Domain string `yaml:"domain"`
	// Store is memory (default: this process alone) or redis (shared by the
	// fleet; needs the redis section).
	Store Store `yaml:"store"`
	// Prefix starts the Redis keys (default "loadshed:rl:").
	Prefix string `yaml:"prefix"`
	// MaxKeys bounds the keys a memory store holds per rule (default 1<<20).
	MaxKeys int `yaml:"max_keys"`
	// Descriptors are the rules. Required.
	Descriptors []Descriptor `yaml:"descriptors"`
}

// Descriptor is one entry of a rule's key. A descriptor with a RateLimit
// is a rule: it counts requests per distinct value of its own key and of
// every descriptor above it. Nested descriptors narrow it further.
type Descriptor struct {
	// Key is key (the client), route ("POST /v1/charges"), priority, or a
	// name Options.Descriptors resolves. Required.
	Key string `yaml:"key"`
	// Value, when set, restricts the entry to requests with this value.
	Value string `yaml:"value"`
	// Name names the rule in headers and metrics (default: its keys and
	// values, joined with dots).
	Name string `yaml:"name"`
	// RateLimit makes this descriptor a rule.
	RateLimit *Rate `yaml:"rate_limit"`
	// ShadowMode records what the rule would reject and never rejects
	// (default off), as Lyft's shadow_mode does.
	ShadowMode bool `yaml:"shadow_mode"`
	// Descriptors nest below this one.
	Descriptors []Descriptor `yaml:"descriptors"`
}

// Rate is one rule's limit.
type Rate struct {
	// Unit is second, minute, hour or day. Required.
	Unit Unit `yaml:"unit"`
	// RequestsPerUnit is how many requests one key may make per unit.
	// Required, at least 1.
	RequestsPerUnit int64 `yaml:"requests_per_unit"`
	// Algorithm is token-bucket (default), leaky-bucket, fixed-window,
	// sliding-log or sliding-window.
	Algorithm ratelimit.Algorithm `yaml:"algorithm"`
	// Burst is the most requests the buckets admit at once (default
	// RequestsPerUnit); the window algorithms ignore it.
	Burst int64 `yaml:"burst"`
}

// Concurrency is a concurrent-request layer.
type Concurrency struct {
	// Name tells this layer apart (default "concurrency").
	Name        string `yaml:"name"`
	Enforcement `yaml:",inline"`
	// Limit is the most requests in flight overall (default none). Over
	// it: 503.
	Limit int64 `yaml:"limit"`
	// PerKey is the most in flight per key (default none). Over it: 429.
	PerKey int64 `yaml:"per_key"`
	// KeyBy is what PerKey counts by: key (default) or route.
	KeyBy concurrency.KeyBy `yaml:"key_by"`
	// RetryAfter is a rejection's Retry-After hint (default 1s).
	RetryAfter time.Duration `yaml:"retry_after"`
	// Adaptive moves the overall limit with latency (default off).
	Adaptive *Adaptive `yaml:"adaptive"`
	// Store is memory (default) or redis (fleet-wide in-flight counts with
	// crash-safe leases).
	Store Store `yaml:"store"`
	// Prefix starts the Redis keys (default "loadshed:concurrency").
	Prefix string `yaml:"prefix"`
	// TTL is how long a crashed host's leases keep counting (default 10s).
	TTL time.Duration `yaml:"ttl"`
	// AsyncRelease sends releases in batches (default off).
	AsyncRelease bool `yaml:"async_release"`
	// Fairness shares the overall limit among clients when requests queue
	// for it (default: max-min fairly, every client weighing the same).
	Fairness Fairness `yaml:"fairness"`
}

// Fairness is layerkit.Fairness: how a layer's queue shares capacity
// among clients (the request's key) within each priority.
type Fairness struct {
	// Off serves a priority's waiters in arrival order, whoever sent them
	// (default false: fair).
	Off bool `yaml:"off"`
	// Weights gives clients, by key, a weight (a tier): a client of weight
	// 2 gets twice the share of one of weight 1 when both ask for more.
	Weights map[string]float64 `yaml:"weights"`
	// DefaultWeight is the weight of the keys Weights does not name
	// (default 1).
	DefaultWeight float64 `yaml:"default_weight"`
}

// Adaptive is concurrency.Adaptive.
type Adaptive struct {
	Floor      int64         `yaml:"floor"`
	Ceiling    int64         `yaml:"ceiling"`
	Window     time.Duration `yaml:"window"`
	MinSamples int64         `yaml:"min_samples"`
	Tolerance  float64       `yaml:"tolerance"`
	Smoothing  float64       `yaml:"smoothing"`
}

// Worker is a worker-utilization layer (worker.Config): it sheds by
// priority when this process's CPU, scheduler latency, queue delay or
// worker budget say it is saturated, and is the headroom signal elastic
// layers read.
type Worker struct {
	// Name tells this layer apart (default "worker").
	Name        string `yaml:"name"`
	Enforcement `yaml:",inline"`
	// Interval is how often the signals are sampled (default 250ms).
	Interval time.Duration `yaml:"interval"`
	// Smoothing is a new sample's weight in the moving averages, (0, 1]
	// (default 0.5).
	Smoothing float64 `yaml:"smoothing"`
	// ShedAt is the pressure at which shedding starts (default 0.8).
	ShedAt float64 `yaml:"shed_at"`
	// RecoverBelow is the pressure below which shedding eases (default 0.7).
	RecoverBelow float64 `yaml:"recover_below"`
	// Recovery is how long shedding one whole priority takes to stop
	// (default 3s).
	Recovery time.Duration `yaml:"recovery"`
	// RiseGain is how fast the shed level climbs (default 4).
	RiseGain float64 `yaml:"rise_gain"`
	// ShedCritical lets the layer shed critical requests, last (default off).
	ShedCritical bool `yaml:"shed_critical"`
	// CPU configures the CPU signal.
	CPU WorkerCPU `yaml:"cpu"`
	// SchedLatencyTarget is the scheduler latency that counts as saturation
	// (default 10ms).
	SchedLatencyTarget time.Duration `yaml:"sched_latency_target"`
	// QueueDelayTarget is, with action queue, the standing queue delay that
	// counts as saturation (default 5ms).
	QueueDelayTarget time.Duration `yaml:"queue_delay_target"`
	// Workers is the worker budget: the most requests in flight in this
	// layer (default none: the limit is learnt, see limit).
	Workers int64 `yaml:"workers"`
	// Limit configures the learnt in-flight limit, on unless workers is
	// set.
	Limit WorkerLimit `yaml:"limit"`
	// BusyWorkers is the worker budget while the layer sheds, at most
	// workers (default workers).
	BusyWorkers int64 `yaml:"busy_workers"`
	// Yield, with a worker budget, yields the processor once after
	// admitting (default off).
	Yield bool `yaml:"yield"`
	// RetryAfter is a rejection's Retry-After hint (default 1s).
	RetryAfter time.Duration `yaml:"retry_after"`
	// Fairness shares the capacity among clients within each priority
	// (default: max-min fairly, every client weighing the same).
	Fairness Fairness `yaml:"fairness"`
}

// WorkerLimit is worker.LimitConfig: every field is optional.
type WorkerLimit struct {
	// Disable turns the learnt limit off (default on, without workers).
	Disable bool `yaml:"disable"`
	// Initial is the limit before anything is learnt (default two per
	// CPU, at least 4).
	Initial int64 `yaml:"initial"`
	// Min and Max bound the limit (default one per CPU, and 10000).
	Min int64 `yaml:"min"`
	Max int64 `yaml:"max"`
}

// WorkerCPU is worker.CPUConfig.
type WorkerCPU struct {
	// Disable turns the CPU signal off (default on).
	Disable bool `yaml:"disable"`
	// Budget is the CPUs this process may use (default: detected from the
	// cgroup, else the machine's).
	Budget float64 `yaml:"budget"`
	// Full is the share of the budget that counts as saturation (default
	// 1.25 with the learnt limit, 1 with workers).
	Full float64 `yaml:"full"`
}

// Fleet is a fleet-usage layer (fleet.Config): the fleet's requests in
// flight by priority, shared through Redis by a background tick, each
// priority held to its ceiling. It needs the redis section.
type Fleet struct {
	// Name tells this layer apart (default "fleet").
	Name        string `yaml:"name"`
	Enforcement `yaml:",inline"`
	// Prefix starts the layer's Redis keys; instances sharing capacity
	// share it (default "loadshed:fleet:").
	Prefix string `yaml:"prefix"`
	// Instance names this instance (default: host name and process id).
	Instance string `yaml:"instance"`
	// Capacity is the units the whole fleet may have in flight. Set it or
	// PerInstance.
	Capacity int64 `yaml:"capacity"`
	// PerInstance is the units one instance may have in flight; capacity
	// is this times the live instances.
	PerInstance int64 `yaml:"per_instance"`
	// Ceilings are the shares of capacity (0 to 1) each priority and those
	// below it may use together (default critical 1, default 0.8,
	// sheddable 0.6, test-mode 0.1).
	Ceilings map[shed.Priority]float64 `yaml:"ceilings"`
	// Interval is how often counts are published and read back (default
	// 100ms, at least 10ms).
	Interval time.Duration `yaml:"interval"`
	// TTL is how long a crashed instance's counts linger (default 2 ×
	// Interval).
	TTL time.Duration `yaml:"ttl"`
	// Timeout bounds one tick's round trip (default Interval/2, at most 50ms).
	Timeout time.Duration `yaml:"timeout"`
	// ExpectedInstances is the fleet size assumed until Redis first answers
	// (default the redis section's expected_instances).
	ExpectedInstances int `yaml:"expected_instances"`
	// RetryAfter is a rejection's Retry-After hint (default Interval).
	RetryAfter time.Duration `yaml:"retry_after"`
}
