package fleet

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// Defaults of Config's optional fields.
const (
	// DefaultName is the layer's name unless Config.Name says otherwise.
	DefaultName = "fleet"
	// DefaultPrefix starts the layer's Redis keys.
	DefaultPrefix = "loadshed:fleet:"
	// DefaultInterval is how often an instance publishes its counts and
	// reads the fleet's back.
	DefaultInterval = 100 * time.Millisecond
	// MinInterval is the shortest Interval accepted.
	MinInterval = 10 * time.Millisecond
	// DefaultTimeoutCap is the longest default Timeout: half the interval,
	// but no more than the other Redis-backed layers' default timeout.
	DefaultTimeoutCap = redisx.DefaultTimeout
)

// Default ceilings, as shares of capacity: requests of a priority and of
// every priority below it together stay within that priority's ceiling.
const (
	DefaultCeilingCritical  = 1.0
	DefaultCeilingDefault   = 0.8
	DefaultCeilingSheddable = 0.6
	DefaultCeilingTestMode  = 0.1
)

// PolicyName is the quota's policy name in rejections ("fleet-usage").
const PolicyName = "fleet-usage"

// Config configures a Layer. Client, Interval and one of Capacity and
// PerInstance are required; every other zero field stands for its default.
// Start from DefaultConfig, which sets Interval.
type Config struct {
	// Name is the layer's name in rejections, events and metrics (default
	// "fleet"). Two fleet layers in one process need different names.
	Name string
	// Client is the shared store: any go-redis v9 UniversalClient (single
	// node, Sentinel or Cluster) whose ContextTimeoutEnabled option is set.
	// Required.
	Client redis.UniversalClient
	// Prefix starts the layer's three Redis keys, which share one hash
	// tag: "{<Prefix>usage}:entries", ":expiry" and ":totals" (default
	// "loadshed:fleet:"). Instances that share capacity share a Prefix;
	// separate fleets (or layers with different capacities) need different
	// ones. It must not contain braces.
	Prefix string
	// Instance names this instance in the fleet (default: host name and
	// process id, "host-1234"). It is a field inside the layer's keys, never
	// part of a key name, so no value can reach outside the Prefix. Two
	// running instances must not share one: they would overwrite each
	// other's counts (Stats.Collisions counts the ticks that saw it happen).
	// At most 200 bytes, printable, no spaces.
	Instance string

	// Capacity is how many units (shed.Request.Cost, at least 1 each) the
	// whole fleet may have in flight. Set it or PerInstance, not both.
	Capacity int64
	// PerInstance is how many units one instance may have in flight; the
	// fleet's capacity is PerInstance × the live instances counted at each
	// tick. Set it or Capacity, not both.
	PerInstance int64
	// Ceilings are the shares of capacity (0 to 1) that each priority and
	// every priority below it may use together. Priorities not in the map
	// take the defaults: critical 1, default 0.8, sheddable 0.6, test-mode
	// 0.1. A higher priority's ceiling must not be below a lower one's.
	Ceilings map[shed.Priority]float64

	// Interval is how often this instance publishes its counts and reads the
	// fleet's totals back, in one Redis round trip: at least 10ms
	// (DefaultInterval, 100ms, in DefaultConfig). Required: a zero Interval
	// is an error, not a default, since TTL, Timeout, RetryAfter and the
	// overshoot all follow from it. It bounds how stale the totals a request is judged on are, and
	// so the overshoot (see the package documentation).
	Interval time.Duration
	// TTL is how long an instance's entry lives after its last publish: a
	// crashed instance's counts leave the totals within TTL + Interval
	// (default 2 × Interval, so within 3 intervals). It must exceed
	// Interval.
	TTL time.Duration
	// Timeout bounds each tick's round trip (default Interval/2, at most
	// 50ms). A tick that fails or times out puts the layer in fallback
	// until one succeeds.
	Timeout time.Duration
	// ExpectedInstances is the fleet size assumed until the first tick
	// answers (default 0: 1). While Redis has never answered, this instance
	// admits Capacity ÷ ExpectedInstances, rounded down; after that, the
	// share divides by the live instances the last good tick counted.
	ExpectedInstances int

	// Enforcement is the mode (hard, soft, elastic), dry run and the action
	// (reject or queue) on "over" (default: hard, enforcing, rejecting).
	// Soft and elastic overage is a fraction of each ceiling.
	Enforcement shed.Enforcement
	// RetryAfter is the Retry-After hint of a rejection (default Interval:
	// the totals change at the next tick).
	RetryAfter time.Duration
	// Clock drives the ticks, soft-mode episodes and the wait queue (default
	// shed.SystemClock). Entries' ages come from the Redis server's clock.
	Clock shed.Clock
}

const maxInstanceLen = 200

// DefaultInstance returns the default instance id: the host name and the
// process id ("host-1234"), with any character Instance does not accept
// replaced by '_'.
func DefaultInstance() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "host"
	}
	id := h + "-" + strconv.Itoa(os.Getpid())
	id = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, id)
	if len(id) > maxInstanceLen {
		id = id[len(id)-maxInstanceLen:]
	}
	return id
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if c.TTL == 0 {
		c.TTL = 2 * c.Interval
	}
	if c.Timeout == 0 {
		c.Timeout = min(c.Interval/2, DefaultTimeoutCap)
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = c.Interval
	}
	return c
}

// DefaultConfig returns a Config with every default that needs no choice
// of the caller's: Interval DefaultInterval, the rest derived from it.
// Set Client and Capacity (or PerInstance) before New.
func DefaultConfig() Config { return Config{Interval: DefaultInterval} }

// ceilings returns the ceiling of each priority, by Priority.Index, with
// the defaults filled in.
func (c Config) ceilings() [shed.NumPriorities]float64 {
	out := [shed.NumPriorities]float64{DefaultCeilingTestMode, DefaultCeilingSheddable, DefaultCeilingDefault, DefaultCeilingCritical}
	for p, v := range c.Ceilings {
		if p.Valid() {
			out[p.Index()] = v
		}
	}
	return out
}

// Validate reports every invalid field, by name (joined with errors.Join).
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("fleet: "+format, args...)) }
	if err := redisx.CheckClient(c.Client); err != nil {
		errs = append(errs, fmt.Errorf("fleet: Config.Client: %w", err))
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		add("Config.Prefix must not contain braces (it is the keys' hash tag), got %q", c.Prefix)
	}
	if c.Instance != "" {
		if len(c.Instance) > maxInstanceLen {
			add("Config.Instance must be at most %d bytes, got %d", maxInstanceLen, len(c.Instance))
		}
		for _, r := range c.Instance {
			if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == unicode.ReplacementChar {
				add("Config.Instance must be printable text without spaces, got %q", c.Instance)
				break
			}
		}
	}
	switch {
	case c.Capacity < 0:
		add("Config.Capacity must be positive, got %d", c.Capacity)
	case c.PerInstance < 0:
		add("Config.PerInstance must be positive, got %d", c.PerInstance)
	case c.Capacity == 0 && c.PerInstance == 0:
		add("Config.Capacity and Config.PerInstance are both unset: set one (fleet-wide units in flight, or units per instance)")
	case c.Capacity > 0 && c.PerInstance > 0:
		add("Config.Capacity (%d) and Config.PerInstance (%d) are both set: set one", c.Capacity, c.PerInstance)
	}
	for p, v := range c.Ceilings {
		if !p.Valid() {
			add("Config.Ceilings has an unknown priority %d", int8(p))
			continue
		}
		if !(v >= 0 && v <= 1) {
			add("Config.Ceilings[%s] must be within [0, 1], got %v", p, v)
		}
	}
	ceil := c.ceilings()
	prio := shed.Priorities()
	for i := 1; i < len(ceil); i++ {
		lo, hi := ceil[i-1], ceil[i]
		if hi < lo && !math.IsNaN(lo) && !math.IsNaN(hi) {
			add("Config.Ceilings[%s] (%v) must not be below Config.Ceilings[%s] (%v): a priority may use at least what the ones below it may",
				prio[i], hi, prio[i-1], lo)
		}
	}
	if c.Interval < MinInterval {
		add("Config.Interval must be at least %v, got %v (DefaultConfig sets it to %v)", MinInterval, c.Interval, DefaultInterval)
	}
	if c.TTL < 0 {
		add("Config.TTL must be positive, got %v", c.TTL)
	}
	if c.Timeout < 0 {
		add("Config.Timeout must be positive, got %v", c.Timeout)
	}
	d := c.withDefaults()
	if c.Interval > 0 && c.TTL >= 0 && d.Interval >= d.TTL {
		add("Config.Interval (%v) must be below Config.TTL (%v), or entries expire between publishes", d.Interval, d.TTL)
	}
	if d.TTL > 0 && d.TTL < time.Millisecond {
		add("Config.TTL must be at least 1ms (Redis keeps milliseconds), got %v", d.TTL)
	}
	if c.Timeout > 0 && c.Interval > 0 && d.Timeout > d.Interval {
		add("Config.Timeout (%v) must not exceed Config.Interval (%v): a tick must end before the next", d.Timeout, d.Interval)
	}
	if c.ExpectedInstances < 0 {
		add("Config.ExpectedInstances must not be negative, got %d", c.ExpectedInstances)
	}
	if c.RetryAfter < 0 {
		add("Config.RetryAfter must not be negative, got %v", c.RetryAfter)
	}
	if err := c.Enforcement.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("fleet: Config.Enforcement: %w", err))
	}
	return errors.Join(errs...)
}
