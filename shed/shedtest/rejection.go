package shedtest

import (
	"errors"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

// Rejection returns the *shed.Rejection in err (errors.As), and fails the
// test at once when there is none, so that a test can go on to check the
// rejection's status, reason and policies.
func Rejection(t testing.TB, err error) *shed.Rejection {
	t.Helper()
	var r *shed.Rejection
	if !errors.As(err, &r) {
		t.Fatalf("error %v, want a *shed.Rejection", err)
	}
	return r
}
