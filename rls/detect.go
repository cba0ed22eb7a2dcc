package rls

import (
	"bytes"

	"github.com/goccy/go-yaml/ast"

	"github.com/loadshed/loadshed/internal/yamlbound"
)

// looksEnvoy reports whether a file is envoyproxy/ratelimit's rather than
// loadshed's: its top level has a domain or descriptors and no layers. The
// file is parsed within lim, as every reader parses it; a file that is not
// YAML, or is past lim, is judged by its lines that start a top-level name,
// so that a broken envoyproxy/ratelimit file gets that format's errors.
func looksEnvoy(data []byte, lim yamlbound.Limits) bool {
	if file, err := yamlbound.Parse(data, lim); err == nil && len(file.Docs) > 0 && file.Docs[0] != nil {
		envoy, layers := false, false
		if m, ok := file.Docs[0].Body.(ast.MapNode); ok {
			for it := m.MapRange(); it.Next(); {
				k := it.Key()
				if k == nil || k.GetToken() == nil {
					continue
				}
				switch k.GetToken().Value {
				case "domain", "descriptors":
					envoy = true
				case "layers":
					layers = true
				}
			}
		}
		return envoy && !layers
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
