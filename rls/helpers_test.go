package rls

import (
	"encoding/json"
	"os"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func wrapperspbUInt64(v uint64) *wrapperspb.UInt64Value { return wrapperspb.UInt64(v) }

func wrap(ds ...*rlpb.RateLimitDescriptor) []*rlpb.RateLimitDescriptor { return ds }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
