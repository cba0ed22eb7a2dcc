package ratefield

import (
	"testing"
	"time"
)

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{-time.Second, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59500 * time.Millisecond, 60}} {
		if got := CeilSeconds(tc.d); got != tc.want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if got := string(AppendSeconds(nil, tc.d)); got != string(AppendInt(nil, tc.want)) {
			t.Errorf("AppendSeconds(%v) = %q, want %d", tc.d, got, tc.want)
		}
	}
}

func TestValidPolicyName(t *testing.T) {
	for s, want := range map[string]bool{
		"per-key": true, "a.b_c-1": true, "": false, "has space": false, `q"uote`: false,
		"x": true, string(make([]byte, 65)): false, "ü": false,
	} {
		if got := ValidPolicyName(s); got != want {
			t.Errorf("ValidPolicyName(%q) = %v, want %v", s, got, want)
		}
	}
}
