// Package propagated decides whether to believe a priority a caller
// propagated (package propagation describes the fields and the rule): the
// HTTP middleware and the gRPC interceptors share it, so that both trust
// the same callers the same way.
package propagated

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/loadshed/loadshed/internal/clientip"
	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

// Trust decides on propagated priorities. A nil *Trust believes nobody
// and counts nothing. It is safe for concurrent use.
type Trust struct {
	peers     []netip.Prefix
	token     [sha256.Size]byte
	tokenOn   bool
	lower     func(string, shed.Priority) shed.Priority
	untrusted func(string)
	ignored   atomic.Int64
}

// NewTrust checks cfg and builds a Trust. pkg and field name where cfg sits in
// the caller's configuration, for errors ("shedhttp", "Config.Propagation").
func NewTrust(cfg propagation.Config, pkg, field string) (*Trust, error) {
	peers, err := clientip.ParsePrefixes(cfg.TrustedPeers, pkg, field+".TrustedPeers")
	if err != nil {
		return nil, err
	}
	if len(peers) == 0 && cfg.Token == "" {
		return nil, fmt.Errorf("%s: %s trusts nobody: set TrustedPeers or Token", pkg, field)
	}
	t := &Trust{peers: peers, lower: cfg.Lower, untrusted: cfg.OnUntrusted}
	if cfg.Token != "" {
		// Compared as hashes, so that the comparison takes the same time
		// whatever length the presented token has.
		t.token, t.tokenOn = sha256.Sum256([]byte(cfg.Token)), true
	}
	return t, nil
}

// ErrUntrusted is what Accept reports for a priority from a caller it does
// not trust.
var ErrUntrusted = errors.New("propagation: priority from an untrusted caller")

// Accept returns the priority a caller propagated (word), when there is one
// and the caller is trusted: its address is one of the trusted peers, or
// token is the shared one. No word gives (Unset, nil); a word from an
// untrusted caller gives ErrUntrusted and is counted (Ignored); a word
// that is no priority is an error. caller is the caller's key, for Lower.
func (t *Trust) Accept(word string, addr netip.Addr, token, caller string) (shed.Priority, error) {
	if word == "" {
		return shed.Unset, nil
	}
	if t == nil {
		return shed.Unset, ErrUntrusted
	}
	if !t.trusted(addr, token) {
		t.ignored.Add(1)
		if t.untrusted != nil {
			t.untrusted(caller)
		}
		return shed.Unset, ErrUntrusted
	}
	p, err := shed.ParsePriority(word)
	if err != nil {
		return shed.Unset, err
	}
	if t.lower != nil {
		if q := t.lower(caller, p); q.Valid() && q < p {
			p = q
		}
	}
	return p, nil
}

func (t *Trust) trusted(addr netip.Addr, token string) bool {
	if addr.IsValid() && clientip.Contains(t.peers, addr) {
		return true
	}
	if !t.tokenOn || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], t.token[:]) == 1
}

// Ignored returns how many propagated priorities were ignored because
// their callers were not trusted.
func (t *Trust) Ignored() int64 {
	if t == nil {
		return 0
	}
	return t.ignored.Load()
}
