package rls

// The overall answer with quota_mode, and the response's dynamic metadata.

import (
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// unlimited reports whether the rule n answers without a limit.
func unlimited(n *node) bool { return n != nil && n.unlimited && len(n.limits) == 0 }

// overall is the request's code: OVER_LIMIT when a descriptor that is not a
// quota is over, or when every quota is (a request passes while any of its
// quotas has room). A descriptor is a quota when its rule has quota_mode
// and a limit of it decided, or, with Config.QuotaMode, whenever it is not
// unlimited.
func (s *Server) overall(nodes []*node, statuses []*pb.RateLimitResponse_DescriptorStatus, ds []decided) pb.RateLimitResponse_Code {
	quotas, quotasOver := 0, 0
	for i, st := range statuses {
		if unlimited(nodes[i]) {
			continue
		}
		quota := s.cfg.QuotaMode || (ds[i].limited && nodes[i].quota)
		over := st.Code == pb.RateLimitResponse_OVER_LIMIT
		switch {
		case quota && over:
			quotas++
			quotasOver++
		case quota:
			quotas++
		case over:
			return pb.RateLimitResponse_OVER_LIMIT
		}
	}
	if quotas > 0 && quotas == quotasOver {
		return pb.RateLimitResponse_OVER_LIMIT
	}
	return pb.RateLimitResponse_OK
}

// dynamicMetadata is what envoyproxy/ratelimit puts into dynamic_metadata:
// the domain, each descriptor's entries ("key=value"), its own limit and
// hits_addend, the request's hits_addend when set, and under "metadata"
// the rules' metadata of the descriptors that passed (neither over nor
// unlimited), merged in the request's order: maps merge, and of two other
// values under one name the first stays.
func dynamicMetadata(req *pb.RateLimitRequest, nodes []*node, statuses []*pb.RateLimitResponse_DescriptorStatus, ds []decided) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.Domain)}
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, st := range statuses {
		n := nodes[i]
		if n == nil || unlimited(n) || st.Code == pb.RateLimitResponse_OVER_LIMIT || !ds[i].limited || n.metadata == nil {
			continue
		}
		mergeStruct(passed, n.metadata)
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

func descriptorStruct(d *rlpb.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.Entries))
	for _, e := range d.Entries {
		entries = append(entries, structpb.NewStringValue(fmt.Sprintf("%s=%s", e.Key, e.Value)))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if d.Limit != nil {
		fields["limit"] = structpb.NewStringValue(d.Limit.String())
	}
	if h := d.HitsAddend; h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct merges src into dst: names dst lacks are added (copied, so
// that no response shares the rules' values), maps under one name merge,
// and any other value already in dst stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if hs, vs := have.GetStructValue(), v.GetStructValue(); hs != nil && vs != nil {
			mergeStruct(hs, vs)
		}
	}
}
