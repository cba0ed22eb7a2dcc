package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/shed"
)

// A fleet of instances sharing 2000 requests in flight through Redis, with
// the default ceilings: sheddable work stops at 60% of the fleet's
// capacity, default work at 80%, and critical work keeps the rest.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	usage, err := fleet.New(fleet.Config{Client: client, Capacity: 2000, Interval: fleet.DefaultInterval})
	if err != nil {
		log.Fatal(err)
	}
	defer usage.Close() // leaves the fleet: the others stop counting this instance at once

	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{usage}})
	if err != nil {
		log.Fatal(err)
	}
	err = chain.Do(context.Background(), shed.Request{Priority: shed.Sheddable}, func(ctx context.Context) error {
		return nil // the work
	})
	var rej *shed.Rejection
	if errors.As(err, &rej) {
		fmt.Println(rej.Status, rej.RetryAfter) // 503 and about one interval
	}
}

// Until Redis answers, an instance admits its share of each ceiling:
// capacity ÷ the instances it expects (later: the live instances the last
// good tick counted), rounded down, and says so.
func Example_fallback() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	nowhere := ln.Addr().String() // a port where no Redis listens
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: nowhere, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	usage, err := fleet.New(fleet.Config{Client: client, Capacity: 40, ExpectedInstances: 4, Interval: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer usage.Close()

	st := usage.Stats()
	fmt.Println("fallback:", st.Fallback, "share:", st.Capacity, "ceilings:", st.Ceilings)
	for _, p := range []shed.Priority{shed.Sheddable, shed.Sheddable, shed.Sheddable, shed.Sheddable, shed.Sheddable, shed.Sheddable, shed.Sheddable, shed.Critical} {
		lease, err := usage.Acquire(context.Background(), shed.Request{Priority: p})
		var rej *shed.Rejection
		if errors.As(err, &rej) {
			fmt.Println(p, "refused:", rej.Status)
			continue
		}
		fmt.Println(p, "admitted, fallback:", lease.Fallback)
	}
	// Output:
	// fallback: true share: 10 ceilings: [1 6 8 10]
	// sheddable admitted, fallback: true
	// sheddable admitted, fallback: true
	// sheddable admitted, fallback: true
	// sheddable admitted, fallback: true
	// sheddable admitted, fallback: true
	// sheddable admitted, fallback: true
	// sheddable refused: 503
	// critical admitted, fallback: true
}
