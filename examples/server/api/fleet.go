package api

import (
	"errors"

	"github.com/loadshed/loadshed/shed"
)

// fleetLayer is the fleet-usage shedder over the Redis at cfg.Redis, or nil
// without one: a process alone needs no fleet layer, the in-flight cap
// covers it. (Placeholder until the fleet layer is merged.)
func (s *Service) fleetLayer(cfg Config, _ LayerSettings) (shed.Layer, error) {
	if cfg.Redis == "" {
		return nil, nil
	}
	return nil, errors.New("api: -redis: the fleet layer is not in this build yet")
}
