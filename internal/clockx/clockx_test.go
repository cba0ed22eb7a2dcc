package clockx

import (
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

func TestOr(t *testing.T) {
	if got := Or(nil); got != shed.SystemClock {
		t.Errorf("Or(nil) = %v, want shed.SystemClock", got)
	}
	c := shedtest.NewClock(time.Unix(1, 0))
	if got := Or(c); got != shed.Clock(c) {
		t.Errorf("Or(c) = %v, want c", got)
	}
}
