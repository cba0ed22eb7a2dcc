package config

// Building a concurrency layer from its section: the one file to change
// when concurrency's API does.

import (
	"fmt"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
)

// concurrency builds the section's layer, or carries the previous build's
// over when the section (and the Redis settings it uses) did not change:
// its in-flight counts, wait queue and adaptive limit survive the reload.
func (b *builder) concurrency(c *Concurrency) ([]shed.Layer, error) {
	cfg := concurrency.Config{
		Name: c.Name, Limit: c.Limit, PerKey: c.PerKey, KeyBy: c.KeyBy,
		Enforcement: b.enforcement(&c.Enforcement), RetryAfter: c.RetryAfter, Clock: b.opts.Clock,
		Fairness: c.Fairness.build(),
	}
	if a := c.Adaptive; a != nil {
		cfg.Adaptive = &concurrency.Adaptive{Floor: a.Floor, Ceiling: a.Ceiling, Window: a.Window,
			MinSamples: a.MinSamples, Tolerance: a.Tolerance, Smoothing: a.Smoothing}
	}
	if c.Store == RedisStore && !b.opts.MemoryOnly {
		client, clientKey, err := b.redis()
		if err != nil {
			return nil, err
		}
		var rc Redis
		if b.f.Redis != nil {
			rc = *b.f.Redis
		}
		key := fmt.Sprintf("concurrency-redis %+v|%+v|%s", *c, cfg.Adaptive, clientKey)
		v, err := b.part(key, func() (any, func() error, error) {
			l, err := concurrency.NewRedis(client, concurrency.RedisConfig{
				Config: cfg, Prefix: c.Prefix, TTL: c.TTL, Timeout: rc.Timeout,
				ExpectedInstances: rc.ExpectedInstances, ProbeInterval: rc.ProbeInterval, AsyncRelease: c.AsyncRelease,
			})
			if err != nil {
				return nil, nil, err
			}
			return l, l.Close, nil
		})
		if err != nil {
			return nil, err
		}
		return []shed.Layer{v.(shed.Layer)}, nil
	}
	key := fmt.Sprintf("concurrency-memory %+v|%+v", *c, cfg.Adaptive)
	v, err := b.part(key, func() (any, func() error, error) {
		l, err := concurrency.New(cfg)
		return l, nil, err
	})
	if err != nil {
		return nil, err
	}
	return []shed.Layer{v.(shed.Layer)}, nil
}
