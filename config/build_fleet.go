package config

// Building a fleet layer from its section: the one file to change when
// fleet's API does.

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/shed"
)

// checkClient stands in for the Redis client when the checker asks
// fleet.Config.Validate about a section. It never connects: nothing calls it.
var checkClient = redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", ContextTimeoutEnabled: true})

func fleetConfig(f *Fleet, r *Redis, enf shed.Enforcement) fleet.Config {
	cfg := fleet.Config{
		Name: f.Name, Prefix: f.Prefix, Instance: f.Instance,
		Capacity: f.Capacity, PerInstance: f.PerInstance, Ceilings: f.Ceilings,
		Interval: f.Interval, TTL: f.TTL, Timeout: f.Timeout,
		ExpectedInstances: f.ExpectedInstances, Enforcement: enf, RetryAfter: f.RetryAfter,
	}
	if cfg.Interval == 0 { // omitted from the file: the documented default
		cfg.Interval = fleet.DefaultInterval
	}
	if cfg.ExpectedInstances == 0 && r != nil {
		cfg.ExpectedInstances = r.ExpectedInstances
	}
	return cfg
}

// fleet builds the section's layer, or carries the previous build's over
// when neither the section nor the Redis settings changed: its counts and
// its background tick go on. Options.MemoryOnly leaves the layer out: it
// has no meaning without the shared store.
func (b *builder) fleet(f *Fleet) ([]shed.Layer, error) {
	if b.opts.MemoryOnly {
		return nil, nil
	}
	client, clientKey, err := b.redis()
	if err != nil {
		return nil, err
	}
	cfg := fleetConfig(f, b.f.Redis, b.enforcement(&f.Enforcement))
	cfg.Client = client
	cfg.Clock = b.opts.Clock
	key := fmt.Sprintf("fleet %+v|%v|%s", *f, cfg.ExpectedInstances, clientKey)
	v, err := b.part(key, func() (any, func() error, error) {
		s, err := fleet.New(cfg)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	})
	if err != nil {
		return nil, err
	}
	return []shed.Layer{v.(*fleet.Layer)}, nil
}
