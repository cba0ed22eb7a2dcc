package rls

// The fields of envoyproxy/ratelimit's descriptors beyond the limit itself:
// share_threshold, value_to_metric, quota_mode and metadata.

import (
	"fmt"
	"slices"
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// fields reads a descriptor's share_threshold, value_to_metric, quota_mode
// and metadata into d, refusing what envoyproxy/ratelimit refuses.
func (p *envoyParser) fields(y yamlDescriptor, d *Descriptor, at string) {
	d.ShareThreshold, d.ValueToMetric, d.QuotaMode = y.ShareThreshold, y.ValueToMetric, y.QuotaMode
	if y.ShareThreshold && !strings.Contains(composite(y.Key, y.Value), "*") {
		p.errorf(at+".share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", composite(y.Key, y.Value))
	}
	if len(y.Metadata) > 0 {
		if _, err := metadataStruct(y.Metadata); err != nil {
			p.errorf(at+".metadata", "error parsing metadata: %v", err)
			return
		}
		d.Metadata = y.Metadata
	}
}

// composite is an entry's name in its tree, as envoyproxy/ratelimit names
// it: the key, and "_value" when there is a value.
func composite(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// metadataStruct converts a descriptor's metadata for the response.
func metadataStruct(m map[string]any) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	v, err := plain(m)
	if err != nil {
		return nil, err
	}
	return structpb.NewStruct(v.(map[string]any))
}

// plain turns YAML's values into those structpb takes: maps with string
// keys, lists, strings, numbers, booleans and null.
func plain(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[k] = p
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(k)] = p
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			out[i] = p
		}
		return out, nil
	case nil, bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return v, nil
	default:
		return nil, fmt.Errorf("unsupported value %v (%T)", v, v)
	}
}

// fields sets what n takes from its descriptor d below parent: its place
// in the tree, the patterns counted in place of values, the metric name's
// parts, the metadata.
func (n *node) fields(parent *node, d *Descriptor) error {
	n.depth = parent.depth + 1
	n.parts = append(slices.Clip(parent.parts), composite(d.Key, d.Value))
	// A name with a '*' is matched as a pattern; shared, the pattern is
	// counted in place of the value (the whole name when the key has the
	// '*', as envoyproxy/ratelimit does).
	wild := strings.Contains(n.parts[n.depth-1], "*")
	own := ""
	if d.ShareThreshold && wild {
		own = d.Value
		if strings.Contains(d.Key, "*") {
			own = n.parts[n.depth-1]
		}
	}
	if own != "" || parent.sharing != nil {
		n.sharing = make([]string, n.depth)
		copy(n.sharing, parent.sharing)
		n.sharing[n.depth-1] = own
	}
	// The request's value names the entry where the tree has the key
	// alone or a pattern it does not share.
	runtime := d.ValueToMetric && (d.Value == "" || (wild && own == ""))
	if runtime || parent.metric != nil {
		n.metric = make([]string, n.depth)
		if parent.metric != nil {
			copy(n.metric, parent.metric)
		} else {
			copy(n.metric, parent.parts)
		}
		if !runtime {
			n.metric[n.depth-1] = n.parts[n.depth-1]
		}
	}
	m, err := metadataStruct(d.Metadata)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if m != nil {
		n.metadata = m
	}
	return nil
}

// countedValue is the value entry i is counted under at n: the shared
// pattern, or its own.
func (n *node) countedValue(i int, e *rlpb.RateLimitDescriptor_Entry) string {
	if i < len(n.sharing) && n.sharing[i] != "" {
		return n.sharing[i]
	}
	return e.Value
}

// metricName is the name value_to_metric gives a request reaching n: each
// entry's part, the request's key and value where the part is "".
func (n *node) metricName(es []*rlpb.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for i, part := range n.metric {
		if i > 0 {
			b.WriteByte('.')
		}
		if part != "" {
			b.WriteString(part)
			continue
		}
		if i < len(es) {
			b.WriteString(composite(es[i].Key, es[i].Value))
		}
	}
	return b.String()
}

// detailedValues are the request's entries for a detailed_metric name;
// entries counted under a shared pattern are named by the pattern.
func (n *node) detailedValues(es []*rlpb.RateLimitDescriptor_Entry) string {
	if n.sharing == nil {
		return detailedValues(es)
	}
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(composite(e.Key, n.countedValue(i, e)))
	}
	return b.String()
}
