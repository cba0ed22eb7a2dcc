// Package grpcmethod resolves a gRPC method's priority from full method
// names and patterns. It is apart from package shedgrpc, which serves
// the table, so that a configuration file's patterns are checked without
// linking gRPC.
package grpcmethod

import (
	"sort"
	"strings"

	"github.com/loadshed/loadshed/shed"
)

// KeyError is a malformed name or pattern, or a priority that is not one.
type KeyError struct {
	Key string
	Why string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Why }

type prefixRule struct {
	prefix string
	prio   shed.Priority
}

// Table resolves a method's priority: an exact name, else the longest
// pattern, else the default. It is read-only once built.
type Table struct {
	exact    map[string]shed.Priority
	prefixes []prefixRule // longest first
	def      shed.Priority
}

// Compile builds the table of names and patterns ("/pkg.Service/Method",
// "/pkg.Service/*", "/pkg.*"), with def (shed.Default if invalid) for the
// methods none covers. The first malformed key, in sorted order, is a
// *KeyError.
func Compile(priorities map[string]shed.Priority, def shed.Priority) (Table, error) {
	t := Table{exact: make(map[string]shed.Priority), def: def}
	if !def.Valid() {
		t.def = shed.Default
	}
	keys := make([]string, 0, len(priorities))
	for k := range priorities {
		keys = append(keys, k)
	}
	sort.Strings(keys) // errors in a stable order
	for _, k := range keys {
		p := priorities[k]
		switch {
		case !p.Valid():
			return t, &KeyError{k, "not a priority"}
		case !strings.HasPrefix(k, "/"):
			return t, &KeyError{k, `a method name starts with "/" ("/pkg.Service/Method")`}
		case strings.Count(k, "*") > 1 || (strings.Contains(k, "*") && !strings.HasSuffix(k, "*")):
			return t, &KeyError{k, `"*" may only end a pattern`}
		case strings.HasSuffix(k, "*"):
			t.prefixes = append(t.prefixes, prefixRule{strings.TrimSuffix(k, "*"), p})
		default:
			t.exact[k] = p
		}
	}
	sort.SliceStable(t.prefixes, func(i, j int) bool { return len(t.prefixes[i].prefix) > len(t.prefixes[j].prefix) })
	return t, nil
}

// Resolve returns method's priority.
func (t *Table) Resolve(method string) shed.Priority {
	if p, ok := t.exact[method]; ok {
		return p
	}
	for _, r := range t.prefixes {
		if strings.HasPrefix(method, r.prefix) {
			return r.prio
		}
	}
	return t.def
}
