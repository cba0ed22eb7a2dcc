package rls

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/internal/hostileyaml"
	"github.com/loadshed/loadshed/internal/yamlbound"
)

// realisticEnvoyFile is as large an envoyproxy/ratelimit file as a
// deployment writes: routes routes, each limited overall and per plan
// (three), each plan per user, four levels of descriptors.
func realisticEnvoyFile(routes int) string {
	var b strings.Builder
	b.WriteString("domain: api\ndescriptors:\n")
	for i := range routes {
		fmt.Fprintf(&b, "  - key: path\n    value: \"/v1/resource-%d\"\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n    descriptors:\n", i)
		for _, plan := range []string{"free", "pro", "enterprise"} {
			fmt.Fprintf(&b, "      - key: plan\n        value: %s\n        rate_limit: {unit: minute, requests_per_unit: 600}\n        descriptors:\n", plan)
			b.WriteString("          - key: user\n            rate_limit: {unit: minute, requests_per_unit: 60}\n            descriptors:\n")
			b.WriteString("              - key: method\n                value: POST\n                rate_limit: {unit: minute, requests_per_unit: 10}\n")
		}
	}
	return b.String()
}

// The largest realistic file reads within the default limits with room to
// spare (a fifth of each at most); with LOADSHED_LIMITS_RESULTS set to a
// file, its figures are written there (scripts/config-limits.sh).
func TestRealisticFileWithinTheDefaultLimits(t *testing.T) {
	data := []byte(realisticEnvoyFile(200))
	values, depth, err := yamlbound.Measure(data, yamlbound.Limits{MaxNodes: 1 << 30, MaxBytes: 1 << 30, MaxDepth: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var d Domain
	var errs config.Errors
	took, heap := hostileyaml.Measure(func() { d, errs = ParseEnvoyConfig("api.yaml", data) })
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	n := 0
	var count func([]Descriptor)
	count = func(ds []Descriptor) {
		for _, x := range ds {
			n++
			count(x.Descriptors)
		}
	}
	count(d.Descriptors)
	lim := config.Limits{}.WithDefaults()
	line := fmt.Sprintf("envoyproxy/ratelimit file of 200 routes x 3 plans x user x method: %d bytes, %d levels deep, %d values, %d descriptors; read in %v, %.1f MiB allocated\n"+
		"defaults: %d bytes, %d levels, %d values, %d descriptors\n",
		len(data), depth, values, n, took.Round(1e6), heap, lim.MaxBytes, lim.MaxDepth, lim.MaxValues, lim.MaxRules)
	t.Log(line)
	if len(data)*5 > lim.MaxBytes || depth*5 > lim.MaxDepth || values*5 > lim.MaxValues || n*5 > lim.MaxRules {
		t.Errorf("the realistic file is past a fifth of a default limit: %s", line)
	}
	if out := os.Getenv("LOADSHED_LIMITS_RESULTS"); out != "" {
		var b strings.Builder
		b.WriteString(line)
		for _, c := range hostileEnvoyFiles {
			path := filepath.Join(t.TempDir(), "f.yaml")
			if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			took, heap := hostileyaml.Measure(func() { _, err = Load(path) })
			fmt.Fprintf(&b, "refused by rls.Load: %s (%d bytes): %v, %.2f MiB allocated\n", c.name, len(c.data), took.Round(1000), heap)
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
