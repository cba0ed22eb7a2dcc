// Package propagation carries a request's priority and remaining deadline
// to the services it calls, so that a critical call stays critical one hop
// later. The cooperating client (package shedclient) writes them; the HTTP
// middleware (shedhttp) and the gRPC interceptors (shedgrpc) read them,
// believing a propagated priority only from callers they trust.
//
// On HTTP the priority travels as Loadshed-Priority: critical and the
// remaining budget as Loadshed-Budget: 250 (milliseconds); on gRPC the
// priority travels as the loadshed-priority metadata and the deadline as
// gRPC's own grpc-timeout. A caller is trusted when its address (as the
// front end resolves it, through trusted proxies) is one of TrustedPeers,
// or when it presents the shared Token (Loadshed-Token / loadshed-token).
// Anyone else's priority is ignored and counted: a client on the internet
// cannot promote itself to critical.
package propagation

import (
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// The HTTP header names, canonical, and the gRPC metadata keys, lower case.
const (
	PriorityHeader   = "Loadshed-Priority"
	BudgetHeader     = "Loadshed-Budget"
	TokenHeader      = "Loadshed-Token"
	PriorityMetadata = "loadshed-priority"
	TokenMetadata    = "loadshed-token"
)

// MaxBudget bounds a propagated budget: a larger one is read as this, so
// that a hostile value cannot overflow a deadline.
const MaxBudget = 24 * time.Hour

// Config says whose propagated priority a server believes.
type Config struct {
	// TrustedPeers are the CIDRs or addresses of the services whose
	// propagated priority is believed. The address checked is the client
	// address the front end resolves (through its own trusted proxies), so
	// a proxy passing an outside client's header along does not make it
	// trusted.
	TrustedPeers []string
	// Token, when set, is a shared secret: a caller that presents it is
	// believed wherever it calls from. Send it only over private links.
	Token string
	// Lower, when set, may lower an accepted priority (never raise it):
	// given the caller's key and the propagated priority, it returns the
	// priority to use; a higher or invalid result keeps the propagated one.
	Lower func(caller string, p shed.Priority) shed.Priority
	// OnUntrusted, when set, is called with the caller's key for every
	// propagated priority ignored because the caller is not trusted: count
	// it, since it is either a misconfigured peer or a client trying to
	// promote itself.
	OnUntrusted func(caller string)
}

// FormatBudget formats the time left until deadline, from now, as the
// Loadshed-Budget value: whole milliseconds, at least 0.
func FormatBudget(deadline, now time.Time) string {
	d := deadline.Sub(now)
	if d < 0 {
		d = 0
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10)
}

// ParseBudget reads a Loadshed-Budget value: whole milliseconds, at most
// MaxBudget (a larger one reads as MaxBudget). Anything else (negative,
// not a number) is not ok.
func ParseBudget(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" || !allDigits(s) {
		return 0, false
	}
	// More than 12 digits is more than MaxBudget whatever they say, and
	// would overflow ParseInt or the Duration.
	if len(s) > 12 {
		return MaxBudget, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	if d := time.Duration(n) * time.Millisecond; d <= MaxBudget {
		return d, true
	}
	return MaxBudget, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
