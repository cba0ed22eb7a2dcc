package rls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// table is one generation of rules, compiled for lookups: swapped whole on
// reload, never changed.
type table struct {
	domains map[string]*node
	stores  map[string]ratelimit.Store // by identity, for the next generation
	softs   []*softLimit               // never carried over: episodes start afresh
}

// wildcard is a child whose name in the tree (key_value) has a '*'.
type wildcard struct {
	parts [][]byte // the name split on '*'
	child *node
}

type node struct {
	children  map[string]*node // by name in the tree: key, or key_value
	wildcards []wildcard       // in the order of the file
	limits    []*limitRule
	unlimited bool
	detailed  bool
	name      string // the path below the domain: "key_value.key"
	shared    bool   // a request's own limit, shared by every domain
	layer     string // a domain's root: its events' layer, "rls:<domain>"

	// sharing holds, per entry of a request reaching this node, the
	// wildcard pattern counted in place of the entry's value
	// (share_threshold), or ""; nil when no entry on the way shares.
	sharing []string
	// metric holds, per entry, the part of the metric name the entry
	// gives: "" for the request's own key and value (value_to_metric);
	// nil when no entry on the way takes the request's value.
	metric []string
	quota  bool
	depth  int      // the entries a request needs to reach this node
	parts  []string // each entry's name in the tree: key, or key_value
	// metadata goes to the gateway when a request passes this rule.
	metadata *structpb.Struct
}

type limitRule struct {
	name     string // for replaces; "" when unnamed
	policy   string // for metrics: the name, or the node's path
	current  *pb.RateLimitResponse_RateLimit
	store    ratelimit.Store // nil: requests_per_unit 0, rejects all
	period   time.Duration
	shadow   bool
	replaces []string
	detailed *detailedNames // nil unless detailed_metric
	valued   *detailedNames // nil unless value_to_metric names it
	soft     *softLimit     // nil unless soft
	counts   ruleCounts     // for the status page
}

// match finds the rule of a request descriptor as envoyproxy/ratelimit
// does: level by level, an entry's key_value is looked up among the
// names in the tree, then matched against the names with a wildcard (in
// the file's order), then its key alone is looked up; the rule applies
// only when its node is reached by the descriptor's last entry.
func (n *node) match(es []*rlpb.RateLimitDescriptor_Entry) *node {
	cur := n
	count := len(es)
	var buf [256]byte
	for i, e := range es {
		name := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next := cur.children[string(name)]
		if next == nil {
			for _, w := range cur.wildcards {
				if wildcardMatch(w.parts, name) {
					next = w.child
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.Key]
		}
		if next == nil {
			return nil
		}
		if i == count-1 {
			if next.limits == nil && !next.unlimited {
				return nil
			}
			return next
		}
		if len(next.children) == 0 {
			return nil
		}
		cur = next
	}
	return nil
}

// wildcardMatch reports whether name matches a pattern split on '*', each
// '*' any run of characters (envoyproxy/ratelimit's rule), without
// allocating.
func wildcardMatch(parts [][]byte, name []byte) bool {
	if len(parts) == 1 {
		return bytes.Equal(parts[0], name)
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(name) < fixed || !bytes.HasPrefix(name, first) || !bytes.HasSuffix(name, last) {
		return false
	}
	rest := name[len(first) : len(name)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := bytes.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// storeFactory makes the store of one limit.
type storeFactory func(domain, path string, l *Limit) (ratelimit.Store, error)

// compile builds a table. A store whose identity (domain, path, limit,
// algorithm) is in prev is taken over, so that counts survive a reload.
func compile(domains []Domain, prev *table, newStore storeFactory, clock shed.Clock) (*table, error) {
	t := &table{domains: map[string]*node{}, stores: map[string]ratelimit.Store{}}
	for _, d := range domains {
		root, ok := t.domains[d.Name]
		if !ok {
			root = &node{layer: "rls:" + d.Name}
			t.domains[d.Name] = root
		}
		if err := t.add(root, d.Name, "", d.Descriptors, false, prev, newStore, clock); err != nil {
			t.close(prev)
			return nil, fmt.Errorf("rls: domain %q: %w", d.Name, err)
		}
	}
	return t, nil
}

func (t *table) add(parent *node, domain, path string, ds []Descriptor, shadow bool, prev *table, newStore storeFactory, clock shed.Clock) error {
	for _, d := range ds {
		if d.Key == "" {
			return fmt.Errorf("%s: descriptor has empty key", d.path)
		}
		part := composite(d.Key, d.Value)
		p := part
		if path != "" {
			p = path + "." + part
		}
		n := parent.children[part]
		if n == nil {
			n = &node{name: p}
			if parent.children == nil {
				parent.children = map[string]*node{}
			}
			parent.children[part] = n
			if strings.Contains(part, "*") {
				w := wildcard{child: n}
				for _, s := range strings.Split(part, "*") {
					w.parts = append(w.parts, []byte(s))
				}
				parent.wildcards = append(parent.wildcards, w)
			}
		}
		n.unlimited = n.unlimited || d.Unlimited
		n.detailed = n.detailed || d.DetailedMetric
		n.quota = n.quota || d.QuotaMode
		if err := n.fields(parent, &d); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for i := range d.Limits {
			l := &d.Limits[i]
			if err := l.check(); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			lr := &limitRule{
				name: l.Name, policy: l.Name, period: l.Period, shadow: d.ShadowMode || shadow, replaces: l.Replaces,
				current: &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit},
			}
			if lr.policy == "" {
				lr.policy = p
				if len(d.Limits) > 1 {
					lr.policy = fmt.Sprintf("%s#%d", p, len(n.limits))
				}
			}
			if d.DetailedMetric {
				lr.detailed = &detailedNames{}
			} else if n.metric != nil && l.Name == "" {
				lr.valued = &detailedNames{}
			}
			if l.RequestsPerUnit > 0 {
				id := fmt.Sprintf("%q|%q|%d|%v|%v", domain, p, len(n.limits), l.Algorithm, l.limit())
				s, ok := prev.take(id)
				if !ok {
					var err error
					if s, err = newStore(domain, fmt.Sprintf("%s|%d", p, len(n.limits)), l); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				t.stores[id] = s
				lr.store = s
				if l.Soft != nil {
					sl, err := newSoftLimit(l.Soft, l, clock)
					if err != nil {
						return fmt.Errorf("%s: soft: %w", p, err)
					}
					t.softs = append(t.softs, sl)
					lr.soft = sl
				}
			}
			n.limits = append(n.limits, lr)
		}
		if err := t.add(n, domain, p, d.Descriptors, shadow, prev, newStore, clock); err != nil {
			return err
		}
	}
	return nil
}

// take returns a store of the previous generation, for the next one.
func (t *table) take(id string) (ratelimit.Store, bool) {
	if t == nil {
		return nil, false
	}
	s, ok := t.stores[id]
	return s, ok
}

// close closes the stores t holds that next does not (all when next is nil).
func (t *table) close(next *table) {
	if t == nil {
		return
	}
	for _, sl := range t.softs {
		sl.close()
	}
	for id, s := range t.stores {
		if next != nil {
			if _, kept := next.stores[id]; kept {
				continue
			}
		}
		if c, ok := s.(interface{ Close() error }); ok {
			c.Close()
		}
	}
}

// redisPrefix is a limit's key prefix: a digest of its domain and path, so
// that no value of the file can reach Redis key syntax (a Cluster hash tag).
func redisPrefix(base, domain, path string) string {
	sum := sha256.Sum256([]byte(domain + "\x00" + path))
	return base + hex.EncodeToString(sum[:8]) + ":"
}

// MaxDetailedValues bounds the distinct values a detailed_metric rule
// reports in metrics; further values are reported as "<rule>.other".
const MaxDetailedValues = 100

type detailedNames struct {
	names sync.Map // string → string
	n     atomic.Int32
}

func (d *detailedNames) name(policy, values string) string { return d.intern(policy, values, "") }

// intern returns the name of values: name, or policy.values when name is
// "", or policy.other past MaxDetailedValues.
func (d *detailedNames) intern(policy, values, name string) string {
	if v, ok := d.names.Load(values); ok {
		return v.(string)
	}
	if d.n.Add(1) > MaxDetailedValues {
		d.n.Add(-1)
		return policy + ".other"
	}
	if name == "" {
		name = policy + "." + values
	}
	if v, loaded := d.names.LoadOrStore(values, name); loaded {
		d.n.Add(-1)
		return v.(string)
	}
	return name
}
