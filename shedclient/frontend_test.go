package shedclient

import (
	"testing"

	"github.com/loadshed/loadshed/shedclient/internal/frontend"
)

// TestFrontEndAnswers: an answer a front end leaves to the client to
// settle is a rejection when its RateLimit lines hold an item, else a
// transport failure; every line counts.
func TestFrontEndAnswers(t *testing.T) {
	for _, tc := range []struct {
		limits                 []string
		rejected, transportErr bool
		items                  int
	}{
		{[]string{`"a";r=0;t=1`, `"b";r=1`}, true, false, 2},
		{[]string{`not a list (`}, false, true, 0},
		{nil, false, true, 0},
	} {
		a := answerOf(&frontend.Answer{RejectedIfLimits: true, Limits: tc.limits})
		if a.rejected != tc.rejected || a.transportErr != tc.transportErr || len(a.limits) != tc.items {
			t.Errorf("%q: %+v", tc.limits, a)
		}
	}
}
