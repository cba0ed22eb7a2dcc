// Package configgrpc applies a configuration file (package config) to a
// gRPC server: the file's chain guards every call, as the file's grpc
// section configures package shedgrpc's interceptors. It is apart from
// package config so that a service speaking only HTTP does not link
// gRPC.
//
//	built, err := config.Load("loadshed.yaml", config.Options{})
//	...
//	opts, err := configgrpc.ServerOptions(built, shedgrpc.Config{})
//	...
//	srv := grpc.NewServer(opts...)
package configgrpc

import (
	"google.golang.org/grpc"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shedgrpc"
)

// Config returns base with the grpc section of b's file applied, and the
// http section's trusted proxies. With no file, it is base.
func Config(b *config.Built, base shedgrpc.Config) shedgrpc.Config {
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

// ServerOptions returns the options that run every call of a gRPC server
// through b's chain, configured by the file's grpc section over base:
// grpc.NewServer(opts...).
func ServerOptions(b *config.Built, base shedgrpc.Config) ([]grpc.ServerOption, error) {
	return shedgrpc.ServerOptions(b.Chain, Config(b, base))
}
