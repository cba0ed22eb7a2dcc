package shed_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

func TestPriorityOrder(t *testing.T) {
	ps := shed.Priorities()
	for i := 1; i < len(ps); i++ {
		if ps[i-1] >= ps[i] {
			t.Fatalf("Priorities() not lowest first: %v", ps)
		}
	}
	for i, p := range ps {
		if p.Index() != i || !p.Valid() {
			t.Errorf("%v: Index %d, Valid %v; want %d, true", p, p.Index(), p.Valid(), i)
		}
	}
	if !(shed.TestMode < shed.Sheddable && shed.Sheddable < shed.Default && shed.Default < shed.Critical) {
		t.Fatal("priorities out of order")
	}
	var zero shed.Priority
	if zero != shed.Unset || zero == shed.Default || zero.Valid() {
		t.Fatalf("zero Priority is %v, want unset (distinct from default, not valid)", zero)
	}
	if zero.Resolve() != shed.Default || zero.String() != "unset" {
		t.Fatalf("Unset resolves to %v and prints %q; want default, \"unset\"", zero.Resolve(), zero.String())
	}
	for _, p := range []shed.Priority{shed.Unset, shed.Critical + 1, 100, -100} {
		if p.Valid() {
			t.Errorf("%d is valid", int8(p))
		}
		if p.Index() != shed.Default.Index() {
			t.Errorf("invalid priority %d has Index %d, want Default's %d", int8(p), p.Index(), shed.Default.Index())
		}
	}
}

func TestPriorityStringAndParse(t *testing.T) {
	for _, tc := range []struct {
		p    shed.Priority
		word string
	}{
		{shed.Critical, "critical"}, {shed.Default, "default"},
		{shed.Sheddable, "sheddable"}, {shed.TestMode, "test-mode"},
	} {
		if got := tc.p.String(); got != tc.word {
			t.Errorf("%d.String() = %q, want %q", int8(tc.p), got, tc.word)
		}
		got, err := shed.ParsePriority(tc.word)
		if err != nil || got != tc.p {
			t.Errorf("ParsePriority(%q) = %v, %v", tc.word, got, err)
		}
	}
	for in, want := range map[string]shed.Priority{
		"CRITICAL": shed.Critical, "  Critical\t": shed.Critical, "normal": shed.Default,
		"Sheddable": shed.Sheddable, "test": shed.TestMode, "testmode": shed.TestMode,
		"test_mode": shed.TestMode, "TEST-MODE": shed.TestMode,
	} {
		if got, err := shed.ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if s := shed.Priority(7).String(); s != "priority(7)" {
		t.Errorf("Priority(7).String() = %q", s)
	}
}

func TestParsePriorityUnknownNamesValid(t *testing.T) {
	for _, in := range []string{"", "urgent", "crit", "1", "test mode"} {
		p, err := shed.ParsePriority(in)
		if err == nil || p != shed.Unset {
			t.Fatalf("ParsePriority(%q) = %v, %v; want Unset and an error", in, p, err)
		}
		msg := err.Error()
		for _, w := range []string{"critical", "default", "sheddable", "test-mode"} {
			if !strings.Contains(msg, w) {
				t.Errorf("ParsePriority(%q) error %q does not name %q", in, msg, w)
			}
		}
		if !strings.Contains(msg, `"`+in+`"`) {
			t.Errorf("ParsePriority(%q) error %q does not quote the input", in, msg)
		}
	}
}

func TestPriorityText(t *testing.T) {
	p0 := shed.Critical
	type doc struct {
		P shed.Priority `json:"p"`
	}
	for _, p := range shed.Priorities() {
		b, err := json.Marshal(doc{p})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"p":"` + p.String() + `"}`; string(b) != want {
			t.Errorf("json %s, want %s", b, want)
		}
		var back doc
		if err := json.Unmarshal(b, &back); err != nil || back.P != p {
			t.Errorf("round trip of %v: %v, %v", p, back.P, err)
		}
	}
	if b, err := shed.Unset.MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("MarshalText(Unset) = %q, %v; want empty", b, err)
	}
	if err := p0.UnmarshalText(nil); err != nil || p0 != shed.Unset {
		t.Errorf("UnmarshalText(empty) = %v, %v; want Unset", p0, err)
	}
	if _, err := shed.Priority(9).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid priority succeeded")
	}
	p := shed.Critical
	if err := p.UnmarshalText([]byte("bogus")); err == nil || p != shed.Critical {
		t.Errorf("UnmarshalText(bogus) = %v, left %v; want an error and the value unchanged", err, p)
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"p":"urgent"}`), &d); err == nil || !strings.Contains(err.Error(), "sheddable") {
		t.Errorf("json.Unmarshal of an unknown word: %v; want an error naming the valid ones", err)
	}
}
