package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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

// entry is a tree edge: a key and a value ("" for a value-less entry).
type entry struct{ key, value string }

type wildcard struct {
	key   string
	parts []string // the value split on '*'
	child *node
}

type node struct {
	children  map[entry]*node
	wildcards []wildcard
	limits    []*limitRule
	unlimited bool
	detailed  bool
	name      string // the path below the domain: "key_value.key"
	shared    bool   // a request's own limit, shared by every domain
	layer     string // a domain's root: its events' layer, "rls:<domain>"
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
	soft     *softLimit     // nil unless soft
	counts   ruleCounts     // for the status page
}

// match finds the rule of a request descriptor as envoyproxy/ratelimit
// does: level by level, an entry matches its key and value, else a
// wildcard value, else its key alone; the rule applies only when its node
// is reached by the descriptor's last entry.
func (n *node) match(es []*rlpb.RateLimitDescriptor_Entry) *node {
	cur := n
	count := len(es)
	for i, e := range es {
		k, v := e.Key, e.Value
		next := cur.children[entry{k, v}]
		if next == nil {
			for _, w := range cur.wildcards {
				if w.key == k && wildcardMatch(w.parts, v) {
					next = w.child
					break
				}
			}
		}
		if next == nil {
			next = cur.children[entry{k, ""}]
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
		if len(next.children) == 0 && len(next.wildcards) == 0 {
			return nil
		}
		cur = next
	}
	return nil
}

// wildcardMatch reports whether value matches a pattern split on '*', each
// '*' any run of characters (envoyproxy/ratelimit's rule), without
// allocating.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
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
		e := entry{d.Key, d.Value}
		part := d.Key
		if d.Value != "" {
			part += "_" + d.Value
		}
		p := part
		if path != "" {
			p = path + "." + part
		}
		n := parent.children[e]
		if n == nil {
			n = &node{name: p}
			if parent.children == nil {
				parent.children = map[entry]*node{}
			}
			parent.children[e] = n
			if strings.Contains(d.Value, "*") {
				parent.wildcards = append(parent.wildcards, wildcard{key: d.Key, parts: strings.Split(d.Value, "*"), child: n})
			}
		}
		n.unlimited = n.unlimited || d.Unlimited
		n.detailed = n.detailed || d.DetailedMetric
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

func (d *detailedNames) name(policy, values string) string {
	if v, ok := d.names.Load(values); ok {
		return v.(string)
	}
	if d.n.Add(1) > MaxDetailedValues {
		d.n.Add(-1)
		return policy + ".other"
	}
	name := policy + "." + values
	if v, loaded := d.names.LoadOrStore(values, name); loaded {
		d.n.Add(-1)
		return v.(string)
	}
	return name
}
