package rls

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/shed"
)

// The verdicts of envoyproxy/ratelimit's own configuration tests, on files
// of ours (testdata/conformance): the same files refused, with our
// positioned errors, and the same rules found for the same descriptors,
// named in metrics as there (less the domain, which is the event's layer;
// detailed_metric names are the rule's path followed by the values).

func TestConformanceRefusals(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"no-domain.yaml", ":1:1: domain: config file cannot have empty domain"},
		{"number-key.yaml", ":1:1: domain: config file cannot have empty domain"},
		{"blank-key.yaml", ":3:10: descriptors[0]: descriptor has empty key"},
		{"twice.yaml", `:6:8: descriptors[1]: duplicate descriptor composite key "route_/cart"`},
		{"bad-unit.yaml", ":5:13: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"},
		{"replaces-itself.yaml", ":8:21: descriptors[0].descriptors[0].rate_limit.replaces: replaces should not contain name of same descriptor"},
		{"replaces-nothing.yaml", ":9:13: descriptors[0].descriptors[0].rate_limit.replaces: should not have an empty replaces entry"},
		{"broken-yaml.yaml", ":2:14: sequence end token ']' not found"},
		{"unknown-field.yaml", `:4:5: unknown field "ratelimit"`},
		{"unknown-limit-field.yaml", `:4:32: unknown field "requests-per-unit"`},
		{"list-of-strings.yaml", ":3:5: string was used where mapping is expected"},
		{"unlimited-unit.yaml", ":4:41: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"},
		{"share-no-wildcard.yaml", ":5:22: descriptors[0].share_threshold: share_threshold can only be used with wildcard values (containing '*'), but found key 'route_/cart'"},
	} {
		path := "testdata/conformance/" + c.file
		if !IsEnvoyConfig(path) {
			t.Errorf("%s: not taken for envoyproxy/ratelimit's format", c.file)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%s: %v, want %q", c.file, err, c.want)
		}
	}
	// One domain in two files of a directory.
	dir := t.TempDir()
	copyFile(t, "testdata/conformance/shop.yaml", filepath.Join(dir, "a.yaml"))
	copyFile(t, "testdata/conformance/shop-more.yaml", filepath.Join(dir, "b.yaml"))
	if _, err := LoadEnvoyConfig(dir); err == nil || !strings.Contains(err.Error(), `b.yaml:1:1: domain: domain "shop" is already defined in`) {
		t.Errorf("one domain twice: %v", err)
	}
}

// lookup is one descriptor and the rule it must find.
type lookup struct {
	domain  string
	entries string // "key=value,key=value"
	limit   uint32 // requests_per_unit; 0: no rule
	unit    pb.RateLimitResponse_RateLimit_Unit
	policy  string // the event's policy; "" when no rule
	name    string // current_limit's name
}

func entries(s string) *rlpb.RateLimitDescriptor {
	if s == "" {
		return &rlpb.RateLimitDescriptor{}
	}
	return desc(strings.Split(s, ",")...)
}

func runLookups(t *testing.T, s *Server, ev *[]shed.Event, ls []lookup) {
	t.Helper()
	for _, l := range ls {
		*ev = (*ev)[:0]
		st := ask(t, s, l.domain, entries(l.entries)).Statuses[0]
		var got lookup
		got.domain, got.entries = l.domain, l.entries
		if cl := st.CurrentLimit; cl != nil {
			got.limit, got.unit, got.name = cl.RequestsPerUnit, cl.Unit, cl.Name
		}
		if len(*ev) > 0 {
			got.policy = (*ev)[len(*ev)-1].Policy
		}
		if got != l {
			t.Errorf("%s %s: %+v, want %+v", l.domain, l.entries, got, l)
		}
	}
}

func conformanceServer(t *testing.T, cfg Config, files ...string) (*Server, *[]shed.Event) {
	t.Helper()
	ev := &[]shed.Event{}
	cfg.Observer = shed.ObserverFunc(func(e shed.Event) { *ev = append(*ev, e) })
	for _, f := range files {
		ds, err := LoadEnvoyConfig("testdata/conformance/" + f)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Domains = append(cfg.Domains, ds...)
	}
	s, _ := testServer(t, cfg)
	return s, ev
}

func TestConformanceMatching(t *testing.T) {
	const (
		sec, min, hour, day = pb.RateLimitResponse_RateLimit_SECOND, pb.RateLimitResponse_RateLimit_MINUTE, pb.RateLimitResponse_RateLimit_HOUR, pb.RateLimitResponse_RateLimit_DAY
	)
	// shop-more.yaml names shop again: served together, the rules merge.
	s, ev := conformanceServer(t, Config{}, "shop.yaml", "shop-more.yaml")
	runLookups(t, s, ev, []lookup{
		{domain: "elsewhere", entries: "region=eu"},
		{domain: "shop", entries: ""},
		{domain: "shop", entries: "route=/other"},
		{domain: "shop", entries: "route=/cart"},
		{domain: "shop", entries: "region=eu,more=x"},
		{domain: "shop", entries: "plan=gold,seat=other"},
		{domain: "shop", entries: "route=/cart,user=bob", limit: 6, unit: sec, policy: "route_/cart.user"},
		{domain: "shop", entries: "route=/cart,user=admin", limit: 60, unit: sec, policy: "route_/cart.user_admin"},
		{domain: "shop", entries: "region=us", limit: 21, unit: min, policy: "region"},
		{domain: "shop", entries: "region=eu", limit: 31, unit: min, policy: "region_eu"},
		{domain: "shop", entries: "region=internal"},
		{domain: "shop", entries: "client=c1", limit: 2, unit: hour, policy: "client"},
		{domain: "shop", entries: "partner=p1", limit: 2, unit: day, policy: "partner_daily", name: "partner_daily"},
		{domain: "shop", entries: "plan=gold", limit: 16, unit: day, policy: "plan_gold"},
		{domain: "shop", entries: "plan=gold,seat=s1", limit: 26, unit: day, policy: "plan_gold.seat_s1"},
		{domain: "shop", entries: "tenant=acme", limit: 71, unit: min, policy: "tenant.tenant_acme"},
		{domain: "shop", entries: "coupon=c", limit: 8, unit: min, policy: "coupon"},
	})
	// unlimited: OK with no limit, and the most remaining.
	if st := ask(t, s, "shop", desc("health=x")).Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: %v", st)
	}

	n, nev := conformanceServer(t, Config{}, "names.yaml")
	runLookups(t, n, nev, []lookup{
		{domain: "names", entries: "any=v", limit: 100, unit: min, policy: "any"},
		{domain: "names", entries: "pat=abc", limit: 101, unit: min, policy: "pat_ab*"},
		{domain: "names", entries: "pat=zzz"},
		{domain: "names", entries: "mid=x1y", limit: 102, unit: min, policy: "mid_x*y"},
		{domain: "names", entries: "mid=x1z"},
		{domain: "names", entries: "multi=a1b2c", limit: 103, unit: min, policy: "multi_a*b*c"},
		{domain: "names", entries: "multi=acb"},
		{domain: "names", entries: "outer=o1,inner=in9", limit: 104, unit: min, policy: "outer_o1.inner_in*"},
		{domain: "names", entries: "op=draw,verb=get,who=u7", limit: 105, unit: min, policy: "op_draw.verb_get.who"},
		{domain: "names", entries: "l1=A,l2=Y,l3=Z", limit: 106, unit: min, policy: "l1.l2_Y.l3"},
		{domain: "names", entries: "vpat=abz", limit: 107, unit: min, policy: "vpat_abz"},
		{domain: "names", entries: "other=abq,sub=S,leaf=L", limit: 108, unit: min, policy: "other_ab*.sub_S.leaf"},
		{domain: "names", entries: "both=B,leaf=L", limit: 109, unit: min, policy: "both.leaf.both_B.leaf_L"},
		{domain: "names", entries: "shared=s/1,leaf=x", limit: 110, unit: min, policy: "shared_s/*.leaf"},
		{domain: "names", entries: "nest=n/1,nest=m/2", limit: 111, unit: min, policy: "nest_n/*.nest_m/*"},
		{domain: "names", entries: "mixed=p/1,file=f/2,kind=k", limit: 112, unit: min, policy: "mixed_p/*.file_f/*.kind"},
		{domain: "names", entries: "item=exact", limit: 113, unit: min, policy: "item_exact"},
		{domain: "names", entries: "item=exz", limit: 114, unit: min, policy: "item_ex*"},
		{domain: "names", entries: "tmid=t1prod", limit: 115, unit: min, policy: "tmid_t*prod"},
		{domain: "names", entries: "tmid=t1dev"},
		{domain: "names", entries: "svc=svc/u,endpoint=get", limit: 116, unit: min, policy: "svc_svc/*.endpoint.svc_svc/*.endpoint_get"},
	})
}

func TestConformanceShadowAndOverride(t *testing.T) {
	s, ev := conformanceServer(t, Config{}, "shadow.yaml")
	twice := func(d *rlpb.RateLimitDescriptor) (pb.RateLimitResponse_Code, shed.EventKind) {
		ask(t, s, "trial", d)
		code := ask(t, s, "trial", d).OverallCode
		return code, (*ev)[len(*ev)-1].Kind
	}
	for _, c := range []struct {
		entries string
		code    pb.RateLimitResponse_Code
		kind    shed.EventKind
	}{
		{"app=enforced", pb.RateLimitResponse_OVER_LIMIT, shed.Rejected},
		{"app=watched", pb.RateLimitResponse_OK, shed.WouldReject},
		{"batch=any", pb.RateLimitResponse_OK, shed.WouldReject},
		{"batch=strict", pb.RateLimitResponse_OVER_LIMIT, shed.Rejected},
	} {
		if code, kind := twice(entries(c.entries)); code != c.code || kind != c.kind {
			t.Errorf("%s twice: %v %v, want %v %v", c.entries, code, kind, c.code, c.kind)
		}
	}
	// A descriptor's own limit is never in shadow mode, and applies to
	// descriptors no rule matches, in a known domain only.
	own := func(e string) *rlpb.RateLimitDescriptor {
		d := entries(e)
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1}
		return d
	}
	for _, e := range []string{"app=watched2", "nothing=here"} {
		ask(t, s, "trial", own(e))
		r := ask(t, s, "trial", own(e))
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
			t.Errorf("own limit on %s: %v", e, r)
		}
	}
	if r, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "unknown", Descriptors: wrap(own("a=b"))}); err != nil || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("own limit in an unknown domain: %v %v", r, err)
	}
}

func TestConformanceMetadata(t *testing.T) {
	s, _ := conformanceServer(t, Config{ResponseDynamicMetadata: true}, "meta.yaml")
	for _, c := range []struct{ entries, want string }{
		{"route=/a,user=bob", `{"owner":"team-a"}`},
		{"route=/a,user=root", `null`},
		{"zone=z", `{"pick":{"name":"east"}}`},
	} {
		md := ask(t, s, "meta", entries(c.entries)).DynamicMetadata.Fields["metadata"].GetStructValue()
		got := "null"
		if md != nil {
			got = canonical(t, md)
		}
		if got != c.want {
			t.Errorf("%s: metadata %s, want %s", c.entries, got, c.want)
		}
	}
}
