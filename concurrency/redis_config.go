package concurrency

import (
	"errors"
	"fmt"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// Defaults of RedisConfig's optional fields. Timeout and ProbeInterval are
// those of every Redis-backed layer (ratelimit's too).
const (
	DefaultPrefix        = "loadshed:cc:"
	DefaultTTL           = 10 * time.Second
	DefaultTimeout       = redisx.DefaultTimeout
	DefaultProbeInterval = redisx.DefaultProbeInterval
)

// RedisConfig configures a RedisLimiter: the limits of Config, counted over
// the whole fleet in Redis.
type RedisConfig struct {
	// Config holds the limits, fleet-wide, and how they are enforced.
	// Adaptive limits and the Queue action are not supported fleet-wide.
	Config
	// Prefix starts every key (default DefaultPrefix). Layers with
	// different limits need different prefixes. It must not contain braces.
	Prefix string
	// TTL is how long a lease lives in Redis without renewal: the longest a
	// crashed host's requests keep counting (default 10s). It must exceed
	// RenewEvery.
	TTL time.Duration
	// RenewEvery is how often this instance renews the leases it holds, in
	// one batch (default TTL/3).
	RenewEvery time.Duration
	// Timeout bounds each Redis call on the request path (default
	// DefaultTimeout). Past it the request is decided by the local share
	// instead. The client must have ContextTimeoutEnabled set, or go-redis
	// ignores the deadline; NewRedis refuses a client it can see lacks it.
	Timeout time.Duration
	// ExpectedInstances, when set, is how many instances share the limits.
	// While Redis does not answer, this instance admits its share: each
	// limit ÷ instances, rounded down, so the fleet never admits more than
	// a limit (a share that rounds to 0 refuses everything under that limit
	// until Redis answers). Unset (0), the instances are counted: each keeps
	// a presence in Redis, refreshed every second, and the share divides by
	// the last count (1 before Redis ever answered).
	ExpectedInstances int
	// ProbeInterval is how often, while falling back, one request tries Redis
	// again (default DefaultProbeInterval); the others go straight to the
	// local share. Layers on one client share one outage gate, probing at
	// the shortest interval any of them asked for.
	ProbeInterval time.Duration
	// AsyncRelease, when set, makes Release return at once: removals are
	// gathered and sent in one pipeline about 5ms later, so a request pays
	// one round trip (its acquire) instead of two, and the fleet sees its
	// slot free a few milliseconds late (default off).
	AsyncRelease bool
}

func (c RedisConfig) options() redisx.Options {
	return redisx.Options{Prefix: c.Prefix, Timeout: c.Timeout, ProbeInterval: c.ProbeInterval, ExpectedInstances: c.ExpectedInstances}
}

func (c RedisConfig) withDefaults() RedisConfig {
	o := c.options().WithDefaults(DefaultPrefix)
	c.Prefix, c.Timeout, c.ProbeInterval = o.Prefix, o.Timeout, o.ProbeInterval
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	return c
}

// Validate reports every invalid field, by name.
func (c RedisConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Adaptive != nil {
		errs = append(errs, errors.New("concurrency: RedisConfig.Adaptive is not supported fleet-wide: use an adaptive local Limiter"))
	}
	if c.Enforcement.Action == shed.Queue {
		errs = append(errs, errors.New("concurrency: RedisConfig.Enforcement.Action Queue is not supported fleet-wide: another host's release cannot wake a waiter here"))
	}
	if err := c.options().Validate("concurrency"); err != nil {
		errs = append(errs, err)
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL must not be negative, got %v", c.TTL))
	}
	if c.RenewEvery < 0 {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.RenewEvery must not be negative, got %v", c.RenewEvery))
	}
	d := c.withDefaults()
	if c.TTL >= 0 && c.RenewEvery >= 0 && d.TTL <= d.RenewEvery {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL (%v) must exceed RedisConfig.RenewEvery (%v), or leases expire between renewals", d.TTL, d.RenewEvery))
	}
	if d.TTL > 0 && d.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("concurrency: RedisConfig.TTL must be at least 1ms (Redis keeps milliseconds), got %v", c.TTL))
	}
	return errors.Join(errs...)
}
