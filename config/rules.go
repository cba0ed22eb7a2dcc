package config

import (
	"strconv"
	"strings"
)

// rule is one rate-limit rule: a descriptor with a rate_limit and the
// entries on its path from the top.
type rule struct {
	name    string
	path    string // the descriptor's field path
	entries []Descriptor
	rate    Rate
	shadow  bool
}

// Rule is one rate-limit rule of a section, its descriptor tree flattened.
type Rule struct {
	// Name is the rule's name, given or derived.
	Name string
	// Entries are the descriptors from the top down to the rule's own,
	// each with only Key and Value set.
	Entries []Descriptor
	// Rate is the rule's limit, as written.
	Rate Rate
	// Shadow says the rule runs in dry run: its shadow_mode, or the
	// section's dry_run.
	Shadow bool
}

// Rules returns the section's rules, depth first in file order.
func (r *RateLimit) Rules() []Rule {
	var out []Rule
	for _, ru := range r.rules("") {
		out = append(out, Rule{Name: ru.name, Entries: ru.entries, Rate: ru.rate, Shadow: ru.shadow || r.DryRun})
	}
	return out
}

// rules flattens the descriptor tree, depth first, in file order.
func (r *RateLimit) rules(path string) []rule {
	var out []rule
	var walk func(ds []Descriptor, above []Descriptor, path string)
	walk = func(ds []Descriptor, above []Descriptor, path string) {
		for i, d := range ds {
			p := path + ".descriptors[" + strconv.Itoa(i) + "]"
			entries := append(append([]Descriptor(nil), above...), Descriptor{Key: d.Key, Value: d.Value})
			if len(entries) > maxDepth {
				continue
			}
			if d.RateLimit != nil {
				name := d.Name
				if name == "" {
					name = ruleName(entries)
				}
				out = append(out, rule{name: name, path: p, entries: entries, rate: *d.RateLimit, shadow: d.ShadowMode})
			}
			walk(d.Descriptors, entries, p)
		}
	}
	walk(r.Descriptors, nil, path)
	return out
}

// ruleName names a rule after its entries: "key", "route_POST-v1-charges.key".
func ruleName(entries []Descriptor) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(nameSafe(e.Key))
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(nameSafe(e.Value))
		}
	}
	s := b.String()
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// nameSafe keeps letters, digits, '-', '_' and '.', turns runs of anything
// else into one '-', and trims '-' at the ends.
func nameSafe(s string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' {
			b.WriteByte(c)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}
