package shed

import (
	"fmt"
	"strings"
)

// Priority says how important a request is. Lower priorities are shed first.
// The zero value is Default, so a request nobody annotated is neither
// protected nor sacrificed.
type Priority int8

// The priorities, lowest first.
const (
	// TestMode is traffic from test-mode credentials: shed before anything else.
	TestMode Priority = -2
	// Sheddable is work a user will not miss for a while: listings, reports.
	Sheddable Priority = -1
	// Default is ordinary traffic.
	Default Priority = 0
	// Critical must get through: "create a charge".
	Critical Priority = 1
)

// NumPriorities is how many priorities there are; Priority.Index maps each to
// 0..NumPriorities-1, lowest first, for per-priority arrays.
const NumPriorities = 4

// Priorities lists every priority, lowest first.
func Priorities() [NumPriorities]Priority {
	return [NumPriorities]Priority{TestMode, Sheddable, Default, Critical}
}

var priorityWords = [NumPriorities]string{"test-mode", "sheddable", "default", "critical"}

// Valid reports whether p is one of the defined priorities.
func (p Priority) Valid() bool { return p >= TestMode && p <= Critical }

// Index maps p to 0..NumPriorities-1, lowest first. An invalid priority maps
// to Default's index, so an index is always safe to use.
func (p Priority) Index() int {
	if !p.Valid() {
		return int(Default - TestMode)
	}
	return int(p - TestMode)
}

// String returns the priority's word: critical, default, sheddable or test-mode.
func (p Priority) String() string {
	if !p.Valid() {
		return fmt.Sprintf("priority(%d)", int8(p))
	}
	return priorityWords[p.Index()]
}

// ParsePriority parses a priority word, ignoring case. "test", "testmode" and
// "test_mode" are accepted for test-mode. An unknown word is an error naming
// the valid ones.
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
	return Default, fmt.Errorf("shed: unknown priority %q (valid: critical, default, sheddable, test-mode)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("shed: invalid priority %d", int8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
