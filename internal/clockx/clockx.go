// Package clockx holds what the library's layers share about shed.Clock.
package clockx

import "github.com/loadshed/loadshed/shed"

// Or returns c, or shed.SystemClock when c is nil: a Config's Clock left
// unset means the real clock.
func Or(c shed.Clock) shed.Clock {
	if c == nil {
		return shed.SystemClock
	}
	return c
}
