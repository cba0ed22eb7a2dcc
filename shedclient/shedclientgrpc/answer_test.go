package shedclientgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedclient"
)

func TestParsePushback(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"700", 700 * time.Millisecond, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"+5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
		{"9999999999999999999999", maxDuration, true},
	} {
		if got, ok := parsePushback(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("parsePushback(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "1e9", "9223372036854775807", "99999999999999999999", " 5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parsePushback(s); d < 0 || !ok && d != 0 {
			t.Fatalf("parsePushback(%q) = %v, %v", s, d, ok)
		}
	})
}

// TestRejectionsCarryTheirStatus: a call the client did not send fails
// with the status its reason stands for, and still reads as the
// client's own error.
func TestRejectionsCarryTheirStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{&shedclient.QuotaError{Destination: "d", Policy: "p", RetryAfter: time.Second}, codes.ResourceExhausted},
		{&shedclient.ThrottleError{Destination: "d", Priority: shed.Default, Probability: 0.5}, codes.Unavailable},
	} {
		err := withStatus(tc.err)
		if status.Code(err) != tc.code || !errors.Is(err, shedclient.ErrThrottled) || !errors.Is(err, tc.err) {
			t.Errorf("%T: code %v, want %v; errors.Is ErrThrottled %v", tc.err, status.Code(err), tc.code, errors.Is(err, shedclient.ErrThrottled))
		}
	}
	if err := withStatus(context.Canceled); err != context.Canceled {
		t.Errorf("the context's error became %v", err)
	}
}

// TestUnavailableIsARejectionOnlyWhenTheServerSaysSo: an UNAVAILABLE with
// a pushback or RateLimit fields is the server shedding the call; one
// with neither is a transport failure.
func TestUnavailableIsARejectionOnlyWhenTheServerSaysSo(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "")
	if a := answerOf(unavailable, nil, metadata.Pairs(pushbackKey, "100")); !a.Rejected || a.RetryAfter != 100*time.Millisecond {
		t.Errorf("with a pushback: %+v", a)
	}
	if a := answerOf(unavailable, nil, metadata.Pairs(rateLimitKey, `"a";r=0;t=1`)); !a.RejectedIfLimits {
		t.Errorf("with RateLimit fields: %+v", a)
	}
	if a := answerOf(unavailable, nil, nil); a.Rejected || !a.RejectedIfLimits || len(a.Limits) != 0 {
		t.Errorf("with nothing: %+v", a)
	}
}
