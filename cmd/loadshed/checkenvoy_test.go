package main

import (
	"strings"
	"testing"
)

// A broken envoyproxy/ratelimit file gets that format's error, at its
// position, and not loadshed's.
func TestCheckBrokenEnvoyFile(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"descriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			":1:1: domain: config file cannot have empty domain"},
		{"domain: shop\ndescriptors: [\n", ":2:14: "},
	} {
		code, _, errOut := runCmd("check", writeFile(t, c.src))
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "layers") {
			t.Errorf("%q: exit %d, %q, want %q", c.src, code, errOut, c.want)
		}
	}
}
