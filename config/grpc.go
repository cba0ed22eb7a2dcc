package config

// The gRPC side: the file's grpc section, for package shedgrpc. Apart
// from the HTTP side so that each is one file to change when its front
// end's API does.

import (
	"sort"
	"strconv"

	"google.golang.org/grpc"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedgrpc"
)

// GRPC configures the gRPC interceptors (shedgrpc.Config). Callers' proxies
// are the http section's TrustedProxies.
type GRPC struct {
	// KeyMetadata, when set, keys calls on that metadata's value
	// ("x-api-key"); default: the caller's address.
	KeyMetadata string `yaml:"key_metadata"`
	// DefaultPriority is the priority of methods Priorities does not name
	// (default: default).
	DefaultPriority shed.Priority `yaml:"default_priority"`
	// Priorities annotates methods: "/payments.v1.Charges/Create":
	// critical, "/payments.v1.Reports/*": sheddable (see
	// shedgrpc.MethodPriorities).
	Priorities map[string]shed.Priority `yaml:"priorities"`
}

func (c *checker) grpc(g *GRPC) {
	for i := 0; i < len(g.KeyMetadata); i++ {
		if ch := g.KeyMetadata[i]; !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			c.errorf("grpc.key_metadata", nil, "%q is not a metadata key", g.KeyMetadata)
			break
		}
	}
	keys := make([]string, 0, len(g.Priorities))
	for k := range g.Priorities {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := shedgrpc.ParseMethodPriorities(map[string]string{k: g.Priorities[k].String()}); err != nil {
			c.errorf("grpc.priorities["+strconv.Quote(k)+"]", nil, "%v", err)
		}
	}
}

// GRPCConfig returns base with the file's grpc section applied, and the
// http section's trusted proxies.
func (b *Built) GRPCConfig(base shedgrpc.Config) shedgrpc.Config {
	cfg := base
	if b.File == nil {
		return cfg
	}
	g := &b.File.GRPC
	if g.KeyMetadata != "" {
		cfg.Key = shedgrpc.KeyMetadata(g.KeyMetadata)
	}
	if len(b.File.HTTP.TrustedProxies) > 0 {
		cfg.ClientIP.TrustedProxies = b.File.HTTP.TrustedProxies
	}
	if g.DefaultPriority.Valid() {
		cfg.DefaultPriority = g.DefaultPriority
	}
	if len(g.Priorities) > 0 {
		cfg.Priorities = make(shedgrpc.MethodPriorities, len(g.Priorities))
		for k, p := range g.Priorities {
			cfg.Priorities[k] = p
		}
	}
	return cfg
}

// GRPCServerOptions returns the options that run every call of a gRPC
// server through b's chain, configured by the file's grpc section over
// base: grpc.NewServer(opts...).
func (b *Built) GRPCServerOptions(base shedgrpc.Config) ([]grpc.ServerOption, error) {
	return shedgrpc.ServerOptions(b.Chain, b.GRPCConfig(base))
}
