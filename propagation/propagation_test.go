package propagation_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

func TestAccept(t *testing.T) {
	tr, err := propagation.New(propagation.Config{TrustedPeers: []string{"10.0.0.0/8"}, Token: "s3cret"}, "test", "Config")
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
		{"critical", outside, "", shed.Unset, propagation.ErrUntrusted},
		{"critical", outside, "s3cre", shed.Unset, propagation.ErrUntrusted},
		{"critical", outside, "s3cret", shed.Critical, nil},
		{"critical", netip.Addr{}, "", shed.Unset, propagation.ErrUntrusted},
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
	if _, err := propagation.New(propagation.Config{}, "test", "Config"); err == nil {
		t.Fatal("a config trusting nobody was accepted")
	}
	var nilTrust *propagation.Trust
	if p, err := nilTrust.Accept("critical", inside, "", ""); p != shed.Unset || err == nil {
		t.Fatal("a nil Trust believed a caller")
	}
}

func TestBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	if got := propagation.FormatBudget(now.Add(1500*time.Millisecond+time.Microsecond), now); got != "1500" {
		t.Fatalf("FormatBudget = %q", got)
	}
	if got := propagation.FormatBudget(now.Add(-time.Second), now); got != "0" {
		t.Fatalf("FormatBudget of a past deadline = %q", got)
	}
	for s, want := range map[string]time.Duration{
		"250": 250 * time.Millisecond, " 0 ": 0, "86400000": propagation.MaxBudget,
		"99999999999999999999999": propagation.MaxBudget, "86400001": propagation.MaxBudget,
	} {
		if d, ok := propagation.ParseBudget(s); !ok || d != want {
			t.Errorf("ParseBudget(%q) = %v, %v; want %v", s, d, ok, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5", "1e3", "+5", "0x10", "ten"} {
		if d, ok := propagation.ParseBudget(s); ok {
			t.Errorf("ParseBudget(%q) = %v, ok", s, d)
		}
	}
}

// FuzzParseBudget: whatever a caller sends, a budget is never negative
// and never above MaxBudget.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"250", "0", "-1", "9223372036854775807", "999999999999", "1000000000000", " 7", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := propagation.ParseBudget(s); ok && (d < 0 || d > propagation.MaxBudget) {
			t.Fatalf("ParseBudget(%q) = %v", s, d)
		}
	})
}
