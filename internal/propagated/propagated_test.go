package propagated_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/loadshed/loadshed/internal/propagated"
	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

func TestAccept(t *testing.T) {
	tr, err := propagated.NewTrust(propagation.Config{TrustedPeers: []string{"10.0.0.0/8"}, Token: "s3cret"}, "test", "Config")
	if err != nil {
		t.Fatal(err)
	}
	inside, outside := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("203.0.113.7")
	for _, tc := range []struct {
		word  string
		addr  netip.Addr
		token string
		want  shed.Priority
		err   error
	}{
		{"", outside, "", shed.Unset, nil},
		{"critical", inside, "", shed.Critical, nil},
		{"critical", netip.MustParseAddr("::ffff:10.1.2.3"), "", shed.Critical, nil},
		{"critical", outside, "", shed.Unset, propagated.ErrUntrusted},
		{"critical", outside, "s3cre", shed.Unset, propagated.ErrUntrusted},
		{"critical", outside, "s3cret", shed.Critical, nil},
		{"critical", netip.Addr{}, "", shed.Unset, propagated.ErrUntrusted},
	} {
		p, err := tr.Accept(tc.word, tc.addr, tc.token, "k")
		if p != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Accept(%q, %v, %q) = %v, %v; want %v, %v", tc.word, tc.addr, tc.token, p, err, tc.want, tc.err)
		}
	}
	if n := tr.Ignored(); n != 3 {
		t.Fatalf("ignored %d, want 3", n)
	}
	if _, err := tr.Accept("urgent", inside, "", "k"); err == nil {
		t.Fatal("an unknown word was accepted")
	}
	if _, err := propagated.NewTrust(propagation.Config{}, "test", "Config"); err == nil {
		t.Fatal("a config trusting nobody was accepted")
	}
	var nilTrust *propagated.Trust
	if p, err := nilTrust.Accept("critical", inside, "", ""); p != shed.Unset || err == nil {
		t.Fatal("a nil Trust believed a caller")
	}
}

func ExampleTrust_Accept() {
	trust, err := propagated.NewTrust(propagation.Config{
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
