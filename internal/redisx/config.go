package redisx

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of the fields every Redis-backed layer's config shares.
const (
	// DefaultTimeout bounds each round trip on the request path.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultProbeInterval is how long a layer decides locally after Redis
	// failed before one request tries Redis again.
	DefaultProbeInterval = 250 * time.Millisecond
)

// Options are the fields every Redis-backed layer's RedisConfig has, under
// the same names. Each layer copies its config into Options, calls Validate
// and WithDefaults, and so has the same rules and defaults as the others.
type Options struct {
	Prefix            string
	Timeout           time.Duration
	ProbeInterval     time.Duration
	ExpectedInstances int
}

// Validate reports every invalid field, each named as
// "<pkg>: RedisConfig.<Field>" (pkg is the layer's package name).
func (o Options) Validate(pkg string) error {
	var errs []error
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("%s: RedisConfig.Prefix must not contain '{' or '}' (they would move the Cluster hash tag), got %q", pkg, o.Prefix))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%s: RedisConfig.Timeout must not be negative, got %v", pkg, o.Timeout))
	}
	if o.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("%s: RedisConfig.ProbeInterval must not be negative, got %v", pkg, o.ProbeInterval))
	}
	if o.ExpectedInstances < 0 {
		errs = append(errs, fmt.Errorf("%s: RedisConfig.ExpectedInstances must not be negative, got %d", pkg, o.ExpectedInstances))
	}
	return errors.Join(errs...)
}

// WithDefaults fills the zero fields: prefix is the layer's own default
// prefix. ExpectedInstances stays 0, meaning "count the live instances".
func (o Options) WithDefaults(prefix string) Options {
	if o.Prefix == "" {
		o.Prefix = prefix
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	return o
}
