package api

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/shed"
)

// fleetLayer is the fleet-usage shedder over the Redis at cfg.Redis, or nil
// without one: a process alone needs no fleet layer, the in-flight cap
// covers it.
func (s *Service) fleetLayer(cfg Config, ls LayerSettings) (shed.Layer, error) {
	if cfg.Redis == "" {
		return nil, nil
	}
	client := redis.NewClient(&redis.Options{Addr: cfg.Redis, ContextTimeoutEnabled: true})
	s.closers = append(s.closers, client.Close)
	f, err := fleet.New(fleet.Config{
		Client:      client,
		Prefix:      cfg.FleetPrefix,
		Instance:    cfg.Instance,
		PerInstance: ls.FleetPerInstance,
		Interval:    fleet.DefaultInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("api: fleet layer: %w", err)
	}
	s.closers = append(s.closers, f.Close)
	return f, nil
}
