package shed

import (
	"fmt"
	"strings"
)

// Priority says how important a request is. Lower priorities are shed first.
//
// The zero value is Unset: nobody said. A chain resolves it, once per run,
// to the context's priority (WithPriority) or else Default, so layers run
// by a chain never see it; a layer called directly treats it as Default
// (Index maps it there). Unset is distinct from Default so that a request
// can be set to Default on purpose, overriding the context.
type Priority int8

// The priorities, lowest first.
const (
	// Unset: no priority was given; it resolves to the context's, else
	// Default. Not one of the ordered priorities: compare only resolved
	// ones (see Resolve).
	Unset Priority = iota
	// TestMode is traffic from test-mode credentials: shed before anything else.
	TestMode
	// Sheddable is work a user will not miss for a while: listings, reports.
	Sheddable
	// Default is ordinary traffic.
	Default
	// Critical must get through: "create a charge".
	Critical
)

// NumPriorities is how many priorities there are; Priority.Index maps each to
// 0..NumPriorities-1, lowest first, for per-priority arrays.
const NumPriorities = 4

// Priorities lists every priority, lowest first.
func Priorities() [NumPriorities]Priority {
	return [NumPriorities]Priority{TestMode, Sheddable, Default, Critical}
}

var priorityWords = [NumPriorities]string{"test-mode", "sheddable", "default", "critical"}

// Valid reports whether p is one of the ordered priorities (not Unset).
func (p Priority) Valid() bool { return p >= TestMode && p <= Critical }

// Resolve returns p, or Default when p is Unset or not a priority at all:
// what a layer called directly, without a chain, should decide on.
func (p Priority) Resolve() Priority {
	if !p.Valid() {
		return Default
	}
	return p
}

// Index maps p to 0..NumPriorities-1, lowest first, for per-priority
// arrays. Unset and invalid priorities map to Default's index, so an index
// is always safe to use.
func (p Priority) Index() int { return int(p.Resolve() - TestMode) }

// String returns the priority's word: critical, default, sheddable or
// test-mode; "unset" for Unset.
func (p Priority) String() string {
	if p == Unset {
		return "unset"
	}
	if !p.Valid() {
		return fmt.Sprintf("priority(%d)", int8(p))
	}
	return priorityWords[p.Index()]
}

// ParsePriority parses a priority word, ignoring case. "test", "testmode" and
// "test_mode" are accepted for test-mode. An unknown word gives Unset (so
// that a caller ignoring the error does not take it for Default) and an
// error naming the valid ones.
func ParsePriority(s string) (Priority, error) {
	w := strings.ToLower(strings.TrimSpace(s))
	switch w {
	case "critical":
		return Critical, nil
	case "default", "normal":
		return Default, nil
	case "sheddable":
		return Sheddable, nil
	case "test-mode", "testmode", "test_mode", "test":
		return TestMode, nil
	}
	return Unset, fmt.Errorf("shed: unknown priority %q (valid: critical, default, sheddable, test-mode)", s)
}

// MarshalText implements encoding.TextMarshaler. Unset marshals as the
// empty text, which UnmarshalText reads back as Unset.
func (p Priority) MarshalText() ([]byte, error) {
	if p == Unset {
		return []byte{}, nil
	}
	if !p.Valid() {
		return nil, fmt.Errorf("shed: invalid priority %d", int8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Priority) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = Unset
		return nil
	}
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
