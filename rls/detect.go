package rls

import (
	"bytes"

	"github.com/goccy/go-yaml"
)

// looksEnvoy reports whether a file is envoyproxy/ratelimit's rather than
// loadshed's: its top level has a domain or descriptors and no layers. A
// file that is not YAML is judged by its lines that start a top-level
// name, so that a broken envoyproxy/ratelimit file gets that format's
// errors.
func looksEnvoy(data []byte) bool {
	var top map[string]any
	if yaml.Unmarshal(data, &top) == nil {
		_, domain := top["domain"]
		_, descriptors := top["descriptors"]
		_, layers := top["layers"]
		return (domain || descriptors) && !layers
	}
	envoy, layers := false, false
	for line := range bytes.Lines(data) {
		switch {
		case bytes.HasPrefix(line, []byte("domain:")), bytes.HasPrefix(line, []byte("descriptors:")):
			envoy = true
		case bytes.HasPrefix(line, []byte("layers:")):
			layers = true
		}
	}
	return envoy && !layers
}
