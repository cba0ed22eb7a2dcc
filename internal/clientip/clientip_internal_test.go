package clientip

import "testing"

// FuzzPeerIPv4 checks the IPv4 fast path of Resolver.Key against the
// general parser: whatever it accepts, the general path accepts with the
// same key.
func FuzzPeerIPv4(f *testing.F) {
	for _, s := range []string{
		"192.0.2.7:5555", "0.0.0.0:0", "255.255.255.255:65535", "256.1.1.1:1", "01.2.3.4:5",
		"1.2.3.4", "1.2.3.4:", "1.2.3:4", "1.2.3.4.5:6", " 1.2.3.4:5", "1.2.3.4:123456",
		"[::1]:80", "::ffff:1.2.3.4", "1..2.3:4", "1.2.3.4:5:6", "10.0.0.10:80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, ok := peerIPv4(s)
		if !ok {
			return
		}
		a, text, ok2 := parseHostPortText(s)
		if !ok2 || !a.Is4() || text != host || a.String() != host {
			t.Fatalf("peerIPv4(%q) = %q, general path: %v %q %v", s, host, a, text, ok2)
		}
	})
}
