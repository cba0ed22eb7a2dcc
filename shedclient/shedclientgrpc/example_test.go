package shedclientgrpc_test

import (
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedclient/shedclientgrpc"
)

// A connection whose calls go through the cooperating client; the same
// Client may serve HTTP transports too, each destination known apart.
func ExampleUnaryInterceptor() {
	c := shedclient.New(shedclient.Config{
		// Reads are safe to send twice; charges are not.
		Idempotent: func(method string) bool { return strings.HasPrefix(method, "/payments.v1.Reports/") },
	})
	conn, err := grpc.NewClient("dns:///payments.internal:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(shedclientgrpc.UnaryInterceptor(c)),
		grpc.WithChainStreamInterceptor(shedclientgrpc.StreamInterceptor(c)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	fmt.Println(conn.Target())
	// Output: dns:///payments.internal:443
}
