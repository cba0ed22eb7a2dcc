package propagation_test

import (
	"fmt"
	"time"

	"github.com/loadshed/loadshed/propagation"
)

func ExampleParseBudget() {
	// A caller with 250ms left sends Loadshed-Budget: 250; the server
	// reads it back as its own deadline, bounded by MaxBudget.
	now := time.Unix(1_700_000_000, 0)
	sent := propagation.FormatBudget(now.Add(250*time.Millisecond), now)
	d, ok := propagation.ParseBudget(sent)
	fmt.Println(sent, d, ok)
	d, ok = propagation.ParseBudget("-5")
	fmt.Println(d, ok)
	// Output:
	// 250 250ms true
	// 0s false
}
