package shedgrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
	"github.com/loadshed/loadshed/shedgrpc"
)

// BenchmarkUnaryInterceptor prices the interceptor alone around a handler
// that does nothing, with no network: keying on the peer's address,
// resolving a method priority and running a one-layer chain; the
// "propagation" case also reads a propagated priority from metadata.
func BenchmarkUnaryInterceptor(b *testing.B) {
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{shedtest.NewLayer("l")}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5555}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("loadshed-priority", "critical"))
	info := &grpc.UnaryServerInfo{FullMethod: "/payments.v1.Charges/Create"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		cfg  shedgrpc.Config
	}{
		{"plain", shedgrpc.Config{Priorities: shedgrpc.MethodPriorities{"/payments.v1.Charges/*": shed.Critical}}},
		{"propagation", shedgrpc.Config{Propagation: &propagationCfg}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in, err := shedgrpc.New(chain, tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			unary := in.Unary()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := unary(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var propagationCfg = propagation.Config{TrustedPeers: []string{"192.0.2.0/24"}}
