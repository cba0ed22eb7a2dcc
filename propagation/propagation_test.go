package propagation_test

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/propagation"
)

func TestBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	if got := propagation.FormatBudget(now.Add(1500*time.Millisecond+time.Microsecond), now); got != "1500" {
		t.Fatalf("FormatBudget = %q", got)
	}
	if got := propagation.FormatBudget(now.Add(-time.Second), now); got != "0" {
		t.Fatalf("FormatBudget of a past deadline = %q", got)
	}
	for s, want := range map[string]time.Duration{
		"250": 250 * time.Millisecond, " 0 ": 0, "86400000": propagation.MaxBudget,
		"99999999999999999999999": propagation.MaxBudget, "86400001": propagation.MaxBudget,
	} {
		if d, ok := propagation.ParseBudget(s); !ok || d != want {
			t.Errorf("ParseBudget(%q) = %v, %v; want %v", s, d, ok, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5", "1e3", "+5", "0x10", "ten"} {
		if d, ok := propagation.ParseBudget(s); ok {
			t.Errorf("ParseBudget(%q) = %v, ok", s, d)
		}
	}
}

// FuzzParseBudget: whatever a caller sends, a budget is never negative
// and never above MaxBudget.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"250", "0", "-1", "9223372036854775807", "999999999999", "1000000000000", " 7", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := propagation.ParseBudget(s); ok && (d < 0 || d > propagation.MaxBudget) {
			t.Fatalf("ParseBudget(%q) = %v", s, d)
		}
	})
}
