package shedhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/loadshed/loadshed/internal/clientip"
)

// KeyFunc says who is asking: it extracts the Request.Key from an HTTP
// request. It returns ErrNoKey when the request carries nothing to key on,
// ErrKeyTooLong when what it carries is too long to be a key, and may return
// errors of its own; Config.OnKeyError decides what then happens.
//
// The keys built-in KeyFuncs return never collide across kinds: client IPs
// are bare addresses ("203.0.113.7", "2001:db8::1"), every other kind starts
// with a prefix holding a letter that no IP address text has ("h:x-api-key:",
// "bearer:"), so a client cannot spend another client's IP quota by sending
// that IP as its API key.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey: the request carries nothing the KeyFunc can key on (a missing or
// empty header, no bearer token, no usable peer address).
var ErrNoKey = errors.New("shedhttp: request carries no key")

// ErrKeyTooLong: the request's key material is longer than MaxKeyPart bytes.
var ErrKeyTooLong = errors.New("shedhttp: request key is too long")

// MaxKeyPart is the longest header value or token the built-in KeyFuncs
// accept. Longer values give ErrKeyTooLong instead of becoming a key, so a
// client cannot make the limiters store megabyte keys.
const MaxKeyPart = 256

// KeyHeader keys requests on the value of the header name (an API key, a
// tenant id): "h:" + the lower-cased header name + ":" + the value. A
// missing or empty header gives ErrNoKey. The value is used as it is; wrap
// the KeyFunc in KeyHash when it is a secret that must not become a store
// key or a log line.
func KeyHeader(name string) KeyFunc {
	canon := textproto.CanonicalMIMEHeaderKey(name)
	prefix := "h:" + strings.ToLower(canon) + ":"
	return func(r *http.Request) (string, error) {
		v := firstHeader(r.Header, canon)
		v = strings.TrimSpace(v)
		if v == "" {
			return "", ErrNoKey
		}
		if len(v) > MaxKeyPart {
			return "", ErrKeyTooLong
		}
		return prefix + v, nil
	}
}

// KeyBearer keys requests on the bearer token of the Authorization header
// (RFC 6750). The token is a credential, so the key is a hash of it:
// "bearer:" + 32 hex digits of its SHA-256; the token itself never becomes a
// store key. No Authorization header, another scheme, or an empty token
// gives ErrNoKey.
func KeyBearer() KeyFunc {
	return func(r *http.Request) (string, error) {
		v := firstHeader(r.Header, "Authorization")
		const scheme = "bearer"
		v = strings.TrimSpace(v)
		if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || (v[len(scheme)] != ' ' && v[len(scheme)] != '\t') {
			return "", ErrNoKey
		}
		tok := strings.TrimSpace(v[len(scheme):])
		if tok == "" {
			return "", ErrNoKey
		}
		if len(tok) > MaxKeyPart {
			return "", ErrKeyTooLong
		}
		return hashKey("bearer:", tok), nil
	}
}

// KeyHash wraps k so that its key is replaced by "hash:" + 32 hex digits of
// its SHA-256, for keys that are secrets (API keys) and must not be stored
// or logged as they are. Errors from k pass through.
func KeyHash(k KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		key, err := k(r)
		if err != nil {
			return "", err
		}
		return hashKey("hash:", key), nil
	}
}

func hashKey(prefix, s string) string {
	sum := sha256.Sum256([]byte(s))
	var buf [64]byte
	n := copy(buf[:], prefix)
	hex.Encode(buf[n:n+32], sum[:16])
	return string(buf[:n+32])
}

// KeyFrom adapts a function of the request to a KeyFunc: an empty result
// gives ErrNoKey, one longer than MaxKeyPart gives ErrKeyTooLong. The value
// is used as it is, so choose values that cannot be confused with another
// kind of key.
func KeyFrom(f func(*http.Request) string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := f(r)
		if v == "" {
			return "", ErrNoKey
		}
		if len(v) > MaxKeyPart {
			return "", ErrKeyTooLong
		}
		return v, nil
	}
}

// KeyClientIP keys requests on the client's IP address as ip resolves it
// (see ClientIP); a nil ip uses the peer address, trusting no proxy.
func KeyClientIP(ip *ClientIP) KeyFunc {
	return ip.Key
}

// KeyCombine keys requests on several keys at once ("this API key from this
// IP"): the parts, in order, each with '|' and '\' escaped by a '\', joined by
// '|', so that no two different lists of parts give the same key. If any part
// fails, the combination fails with that part's error.
func KeyCombine(parts ...KeyFunc) KeyFunc {
	ps := append([]KeyFunc(nil), parts...)
	return func(r *http.Request) (string, error) {
		var b []byte
		for i, p := range ps {
			k, err := p(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b = append(b, '|')
			}
			for j := 0; j < len(k); j++ {
				if c := k[j]; c == '|' || c == '\\' {
					b = append(b, '\\')
				}
				b = append(b, k[j])
			}
		}
		if len(b) == 0 {
			return "", ErrNoKey
		}
		return string(b), nil
	}
}

// firstHeader is Header.Get without canonicalizing the name again: name must
// already be canonical.
func firstHeader(h http.Header, canon string) string {
	if v := h[canon]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ClientIPConfig says whom to believe about the client's address.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs ("10.0.0.0/8", "2001:db8::/32") or single
	// addresses of the proxies in front of the service. Only when the peer
	// (RemoteAddr) is one of them is Header read. Default: none, and the
	// peer address is the client.
	TrustedProxies []string
	// Header is where trusted proxies put the client's address: a
	// comma-separated list of addresses appended hop by hop, as
	// X-Forwarded-For (the default) or X-Real-Ip carry it, or "Forwarded"
	// for RFC 7239's for= parameters. Name the one header your proxies
	// write: a header they pass through untouched is the client's to forge.
	Header string
	// IPv6PrefixBits, when set (1 to 128), keys IPv6 clients by their
	// network of that many bits instead of their address: a client is
	// usually given a whole /64, and could otherwise spend a fresh quota per
	// address. 64 is the usual choice; the default keys each address.
	IPv6PrefixBits int
}

// ClientIP resolves a request's client address. A nil *ClientIP trusts no
// proxy: the client is the peer. It is safe for concurrent use.
type ClientIP struct {
	r *clientip.Resolver
}

// NewClientIP checks cfg and builds a ClientIP. A malformed proxy CIDR is an
// error naming it.
func NewClientIP(cfg ClientIPConfig) (*ClientIP, error) {
	return newClientIP(cfg, "ClientIPConfig")
}

func newClientIP(cfg ClientIPConfig, field string) (*ClientIP, error) {
	r, err := clientip.New(clientip.Config(cfg), "shedhttp", field)
	if err != nil {
		return nil, err
	}
	return &ClientIP{r: r}, nil
}

func (c *ClientIP) resolver() *clientip.Resolver {
	if c == nil {
		return nil
	}
	return c.r
}

// Trusted reports whether a is one of the trusted proxies.
func (c *ClientIP) Trusted(a netip.Addr) bool { return c.resolver().Trusted(a) }

// Addr returns the client's address: the peer's, unless the peer is a
// trusted proxy, in which case the proxies' header is walked from right to
// left, skipping trusted hops, and the first untrusted address is the
// client. When every hop is trusted, the leftmost one is the client; when a
// hop is malformed (or "unknown"), the last good hop to its right is. It
// returns ErrNoKey when the peer address itself is not an IP (a Unix socket,
// say). It never panics, whatever the headers hold.
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	res := c.resolver()
	a, ok := res.Addr(r.RemoteAddr, proxyHeader(res, r))
	if !ok {
		return a, ErrNoKey
	}
	return a, nil
}

// proxyHeader returns the values of the proxies' header, nil when no proxy
// is trusted (the header is then never read).
func proxyHeader(res *clientip.Resolver, r *http.Request) []string {
	if !res.Trusting() {
		return nil
	}
	return r.Header[res.Header()]
}

// Key is a KeyFunc: the client's address as text ("203.0.113.7",
// "2001:db8::1"), or its IPv6 network ("2001:db8:1:2::/64") when
// IPv6PrefixBits says so.
func (c *ClientIP) Key(r *http.Request) (string, error) {
	res := c.resolver()
	k, ok := res.Key(r.RemoteAddr, proxyHeader(res, r))
	if !ok {
		return "", ErrNoKey
	}
	return k, nil
}
