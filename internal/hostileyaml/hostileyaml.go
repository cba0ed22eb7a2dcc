// Package hostileyaml builds the hostile files the configuration readers'
// tests must refuse at a small cost (config's loadshed files, rls's
// envoyproxy/ratelimit files, yamlbound's bounded parse), and measures what
// refusing one costs. It is test data: only tests import it.
package hostileyaml

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// EnvoyHead starts an envoyproxy/ratelimit file of the domain d, at its
// descriptors.
const EnvoyHead = "domain: d\ndescriptors: "

// LoadshedHead starts a loadshed file of one rate limit layer, at its
// descriptors.
const LoadshedHead = "layers:\n  - ratelimit:\n      descriptors: "

// Deep is head followed by descriptors nested n deep, each keyed key, in
// flow style: "[{key: key, descriptors: [{key: key, ...}]}]".
func Deep(head, key string, n int) string {
	return head + strings.Repeat("[{key: "+key+", descriptors: ", n) + "[]" + strings.Repeat("}]", n) + "\n"
}

// EnvoyLaughs is a "billion laughs" over envoyproxy/ratelimit descriptors:
// each level lists ten descriptors whose children are the previous level,
// 10^(levels-1) valid limits in all once the aliases are expanded.
func EnvoyLaughs(levels int) string {
	return laughs("domain: d\ndescriptors:\n  - key: l0\n    descriptors: &a0 [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"  - key: l%[1]d\n    descriptors: &a%[1]d [", "{key: k%[1]d, descriptors: *a%[2]d}", levels)
}

// LoadshedLaughs multiplies a loadshed file's descriptors by aliases, each
// level ten of the previous one; every leaf is wrong (no unit), so that a
// file within the limits still has thousands of errors.
func LoadshedLaughs(levels int) string {
	return laughs("layers:\n  - ratelimit:\n      descriptors:\n        - key: key\n          descriptors: &a0 [{key: route, rate_limit: {requests_per_unit: 1}}]\n",
		"        - key: key\n          descriptors: &a%[1]d [", "{key: route, value: v%[1]d, descriptors: *a%[2]d}", levels)
}

// laughs is first (the level &a0), then each further level i as level
// formats it (%[1]d: i), listing ten children as child formats them
// (%[1]d: the child, %[2]d: the level they alias, i-1).
func laughs(first, level, child string, levels int) string {
	var b strings.Builder
	b.WriteString(first)
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, level, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, child, j, i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// Measure runs f and returns its time and the heap it allocated, in MiB.
func Measure(f func()) (took time.Duration, heapMiB float64) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	return took, float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
}
