package shedhttp

import (
	"net/http"
	"testing"
)

// BenchmarkClientIPKey prices keying a request on its peer address.
func BenchmarkClientIPKey(b *testing.B) {
	for _, peer := range []string{"192.0.2.7:5555", "[2001:db8::1]:443"} {
		b.Run(peer, func(b *testing.B) {
			r := &http.Request{RemoteAddr: peer}
			var c *ClientIP
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Key(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
