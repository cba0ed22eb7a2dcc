package hostileyaml

import (
	"strings"
	"testing"
)

func TestDeepNestsNDeep(t *testing.T) {
	if got, want := Deep("h: ", "k", 2), "h: [{key: k, descriptors: [{key: k, descriptors: []}]}]\n"; got != want {
		t.Errorf("Deep(2) = %q, want %q", got, want)
	}
}

// Each level past the first refers ten times to the one before it, so
// that the file of n levels expands to 10^(n-1) leaves.
func TestLaughsMultiplyByTen(t *testing.T) {
	for name, f := range map[string]func(int) string{"EnvoyLaughs": EnvoyLaughs, "LoadshedLaughs": LoadshedLaughs} {
		s := f(4)
		for i, ref := range []string{"*a0", "*a1", "*a2"} {
			if n := strings.Count(s, ref); n != 10 {
				t.Errorf("%s(4): level %d refers to %s %d times, want 10", name, i+1, ref, n)
			}
		}
		if strings.Contains(s, "*a3") || !strings.Contains(s, "&a3") {
			t.Errorf("%s(4) does not end at its fourth level:\n%s", name, s)
		}
	}
}
