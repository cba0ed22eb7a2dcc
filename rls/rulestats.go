package rls

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// ruleCounts are what one limit decided since it was loaded: units asked,
// refused (or, in shadow mode, that would have been) and admitted within
// the last fifth of the limit, as envoyproxy/ratelimit's total_hits,
// over_limit and near_limit count them.
type ruleCounts struct {
	hits, over, near atomic.Uint64
}

// nearLimitRatio is envoyproxy/ratelimit's default: an admission that
// leaves less than this share of the limit is near it.
const nearLimitRatio = 0.8

// count records c's decision of hits units.
func (rc *ruleCounts) count(c *checked, hits uint64) {
	if c.skipped || hits == 0 {
		return
	}
	rc.hits.Add(hits)
	switch {
	case c.over:
		rc.over.Add(hits)
	case c.res.Limit > 0 && float64(c.res.Limit-c.res.Remaining) >= nearLimitRatio*float64(c.res.Limit):
		rc.near.Add(hits)
	}
}

// RuleStats is one limit of the running rules, as envoyproxy/ratelimit's
// /rlconfig lists it, with what it decided since it was loaded (a reload
// that keeps a limit starts its counts afresh).
type RuleStats struct {
	// Key is the rule's path: "domain.key_value.key".
	Key string
	// Limit is "unit=MINUTE requests_per_unit=10", with the limit's name
	// first when it has one.
	Limit string
	// Shadow is set for a limit in shadow mode: it counts, never refuses.
	Shadow bool
	// Hits counts the units asked; OverLimit those refused (in shadow
	// mode, that would have been); NearLimit those admitted with less than
	// a fifth of the limit left.
	Hits, OverLimit, NearLimit uint64
}

// Rules lists the running rules, domain by domain and path by path in
// order, with their counts. It is for a status page: it walks the rules
// and allocates, so call it when asked, not per request.
func (s *Server) Rules() []RuleStats {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	var out []RuleStats
	domains := make([]string, 0, len(t.domains))
	for d := range t.domains {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	for _, d := range domains {
		out = appendRules(out, d, t.domains[d])
	}
	return out
}

func appendRules(out []RuleStats, domain string, n *node) []RuleStats {
	for _, l := range n.limits {
		var b strings.Builder
		if l.name != "" {
			b.WriteString("name=")
			b.WriteString(l.name)
			b.WriteString(", ")
		}
		b.WriteString("unit=")
		b.WriteString(l.current.Unit.String())
		b.WriteString(" requests_per_unit=")
		b.WriteString(strconv.FormatUint(uint64(l.current.RequestsPerUnit), 10))
		out = append(out, RuleStats{Key: domain + "." + n.name, Limit: b.String(), Shadow: l.shadow,
			Hits: l.counts.hits.Load(), OverLimit: l.counts.over.Load(), NearLimit: l.counts.near.Load()})
	}
	if n.unlimited && len(n.limits) == 0 {
		out = append(out, RuleStats{Key: domain + "." + n.name, Limit: "unlimited"})
	}
	kids := make([]*node, 0, len(n.children))
	for _, c := range n.children {
		kids = append(kids, c)
	}
	slices.SortFunc(kids, func(a, b *node) int { return cmp.Compare(a.name, b.name) })
	for _, c := range kids {
		out = appendRules(out, domain, c)
	}
	return out
}
