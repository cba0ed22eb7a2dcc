package propagation_test

import (
	"fmt"
	"net/netip"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

func ExampleTrust_Accept() {
	trust, err := propagation.New(propagation.Config{
		TrustedPeers: []string{"10.0.0.0/8"}, // the services that call this one
		Lower: func(caller string, p shed.Priority) shed.Priority {
			if caller == "batch-jobs" {
				return shed.Sheddable // whatever the batch runner says
			}
			return p
		},
	}, "example", "Config")
	if err != nil {
		panic(err)
	}
	for _, c := range []struct {
		addr, caller string
	}{{"10.1.2.3", "checkout"}, {"10.1.2.4", "batch-jobs"}, {"203.0.113.7", "someone"}} {
		p, err := trust.Accept("critical", netip.MustParseAddr(c.addr), "", c.caller)
		fmt.Println(c.caller, p, err)
	}
	fmt.Println("ignored:", trust.Ignored())
	// Output:
	// checkout critical <nil>
	// batch-jobs sheddable <nil>
	// someone unset propagation: priority from an untrusted caller
	// ignored: 1
}
