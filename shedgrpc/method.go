package shedgrpc

import (
	"sort"
	"strings"

	"github.com/loadshed/loadshed/shed"
)

// MethodPriorities annotates methods with priorities. A key is a full
// method name ("/payments.v1.Charges/Create"), or a pattern ending in "*"
// that covers every method it prefixes: "/payments.v1.Charges/*" a whole
// service, "/payments.v1.*" a whole package. An exact name wins over a
// pattern, a longer pattern over a shorter one. Methods no key covers get
// Config.DefaultPriority.
type MethodPriorities map[string]shed.Priority

// ParseMethodPriorities builds MethodPriorities from priority words, as a
// configuration file holds them. An unknown word or a malformed key is an
// error naming it.
func ParseMethodPriorities(words map[string]string) (MethodPriorities, error) {
	mp := make(MethodPriorities, len(words))
	for k, w := range words {
		p, err := shed.ParsePriority(w)
		if err != nil {
			return nil, errMethod(k, err.Error())
		}
		mp[k] = p
	}
	if _, err := compileMethods(mp, shed.Default); err != nil {
		return nil, err
	}
	return mp, nil
}

type prefixRule struct {
	prefix string
	prio   shed.Priority
}

// methodTable resolves a method's priority: an exact name, else the
// longest pattern, else the default. It is read-only once built.
type methodTable struct {
	exact    map[string]shed.Priority
	prefixes []prefixRule // longest first
	def      shed.Priority
}

func compileMethods(mp MethodPriorities, def shed.Priority) (methodTable, error) {
	t := methodTable{exact: make(map[string]shed.Priority), def: def}
	if !def.Valid() {
		t.def = shed.Default
	}
	var keys []string
	for k := range mp {
		keys = append(keys, k)
	}
	sort.Strings(keys) // errors in a stable order
	for _, k := range keys {
		p := mp[k]
		switch {
		case !p.Valid():
			return t, errMethod(k, "not a priority")
		case !strings.HasPrefix(k, "/"):
			return t, errMethod(k, `a method name starts with "/" ("/pkg.Service/Method")`)
		case strings.Count(k, "*") > 1 || (strings.Contains(k, "*") && !strings.HasSuffix(k, "*")):
			return t, errMethod(k, `"*" may only end a pattern`)
		case strings.HasSuffix(k, "*"):
			t.prefixes = append(t.prefixes, prefixRule{strings.TrimSuffix(k, "*"), p})
		default:
			t.exact[k] = p
		}
	}
	sort.SliceStable(t.prefixes, func(i, j int) bool { return len(t.prefixes[i].prefix) > len(t.prefixes[j].prefix) })
	return t, nil
}

func (t *methodTable) resolve(method string) shed.Priority {
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
