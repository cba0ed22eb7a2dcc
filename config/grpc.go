package config

// The gRPC side: the file's grpc section, for package shedgrpc. It is
// checked here, with the rest of the file, and applied by package
// configgrpc, so that a service speaking only HTTP does not link gRPC.

import (
	"errors"
	"sort"
	"strconv"

	"github.com/loadshed/loadshed/internal/grpcmethod"
	"github.com/loadshed/loadshed/shed"
)

// GRPC configures the gRPC interceptors (shedgrpc.Config, applied by
// configgrpc.Config). Callers' proxies are the http section's
// TrustedProxies.
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
		var ke *grpcmethod.KeyError
		if _, err := grpcmethod.Compile(map[string]shed.Priority{k: g.Priorities[k]}, shed.Default); errors.As(err, &ke) {
			c.errorf("grpc.priorities["+strconv.Quote(k)+"]", nil, "%s", ke.Why)
		}
	}
}
