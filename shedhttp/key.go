package shedhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
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
	trusted   []netip.Prefix
	header    string
	forwarded bool
	v6bits    int
}

// maxHops bounds how many proxy hops ClientIP walks through, so that a
// header of a million commas costs a bounded amount of work.
const maxHops = 64

// NewClientIP checks cfg and builds a ClientIP. A malformed proxy CIDR is an
// error naming it.
func NewClientIP(cfg ClientIPConfig) (*ClientIP, error) {
	return newClientIP(cfg, "ClientIPConfig")
}

func newClientIP(cfg ClientIPConfig, field string) (*ClientIP, error) {
	c := &ClientIP{header: "X-Forwarded-For"}
	if cfg.Header != "" {
		c.header = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(cfg.Header))
		if !validHeaderName(c.header) {
			return nil, fmt.Errorf("shedhttp: %s.Header %q is not a valid header name", field, cfg.Header)
		}
	}
	c.forwarded = c.header == "Forwarded"
	if cfg.IPv6PrefixBits < 0 || cfg.IPv6PrefixBits > 128 {
		return nil, fmt.Errorf("shedhttp: %s.IPv6PrefixBits must be within [0, 128], got %d", field, cfg.IPv6PrefixBits)
	}
	c.v6bits = cfg.IPv6PrefixBits
	for i, s := range cfg.TrustedProxies {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("shedhttp: %s.TrustedProxies[%d] %q is not a CIDR or an IP address: %w", field, i, cfg.TrustedProxies[i], err)
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("shedhttp: %s.TrustedProxies[%d] %q must not have a zone", field, i, cfg.TrustedProxies[i])
		}
		p = p.Masked()
		if p.Addr().Is4In6() {
			// Compare mapped addresses in their IPv4 form, as addresses are.
			bits := p.Bits() - 96
			if bits < 0 {
				bits = 0
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
		}
		c.trusted = append(c.trusted, p)
	}
	return c, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Trusted reports whether a is one of the trusted proxies.
func (c *ClientIP) Trusted(a netip.Addr) bool {
	if c == nil {
		return false
	}
	a = a.Unmap()
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address: the peer's, unless the peer is a
// trusted proxy, in which case the proxies' header is walked from right to
// left, skipping trusted hops, and the first untrusted address is the
// client. When every hop is trusted, the leftmost one is the client; when a
// hop is malformed (or "unknown"), the last good hop to its right is. It
// returns ErrNoKey when the peer address itself is not an IP (a Unix socket,
// say). It never panics, whatever the headers hold.
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	a, _, err := c.addr(r)
	return a, err
}

// addr is Addr, also returning the peer's address text when the client is
// the peer ("" otherwise).
func (c *ClientIP) addr(r *http.Request) (netip.Addr, string, error) {
	peer, text, ok := parseHostPortText(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", ErrNoKey
	}
	if c == nil || len(c.trusted) == 0 || !c.Trusted(peer) {
		return peer, text, nil
	}
	vals := r.Header[c.header]
	if len(vals) == 0 {
		return peer, text, nil
	}
	if c.forwarded {
		return c.walkForwarded(vals, peer), "", nil
	}
	return c.walkList(vals, peer), "", nil
}

// walkList walks comma-separated address lists right to left; empty list
// elements are skipped, as HTTP list syntax allows them.
func (c *ClientIP) walkList(vals []string, last netip.Addr) netip.Addr {
	hops := 0
	for i := len(vals) - 1; i >= 0; i-- {
		rest := vals[i]
		for {
			j := strings.LastIndexByte(rest, ',')
			if hop := strings.TrimSpace(rest[j+1:]); hop != "" {
				a, ok := parseHostPort(hop)
				if !ok {
					return last
				}
				if !c.Trusted(a) {
					return a
				}
				last = a
				if hops++; hops >= maxHops {
					return last
				}
			}
			if j < 0 {
				break
			}
			rest = rest[:j]
		}
	}
	return last
}

// walkForwarded walks RFC 7239 Forwarded elements right to left. Elements
// are split forwards (quoted strings may hold commas) into a bounded window
// of the last maxHops for= values.
func (c *ClientIP) walkForwarded(vals []string, last netip.Addr) netip.Addr {
	var ring [maxHops]string
	n := 0
	for _, v := range vals {
		forEachForwardedFor(v, func(f string) {
			ring[n%maxHops] = f
			n++
		})
	}
	lo := max(n-maxHops, 0)
	for i := n - 1; i >= lo; i-- {
		a, ok := parseForwardedNode(ring[i%maxHops])
		if !ok {
			return last
		}
		if !c.Trusted(a) {
			return a
		}
		last = a
	}
	return last
}

// forEachForwardedFor calls f with the for= value of each element of one
// Forwarded field value ("" for an element without one), in order, quotes
// removed. Empty elements are skipped. Malformed input yields odd values,
// never a panic or an endless loop: every step moves i forward.
func forEachForwardedFor(v string, f func(string)) {
	i := 0
	for {
		forVal, seen, nonEmpty := "", false, false
		for i < len(v) && v[i] != ',' {
			if c := v[i]; c == ' ' || c == '\t' || c == ';' {
				i++
				continue
			}
			nonEmpty = true
			ks := i
			for i < len(v) && v[i] != '=' && v[i] != ';' && v[i] != ',' {
				i++
			}
			key := strings.TrimSpace(v[ks:i])
			val := ""
			if i < len(v) && v[i] == '=' {
				i++
				if i < len(v) && v[i] == '"' {
					i++
					vs := i
					for i < len(v) && v[i] != '"' {
						if v[i] == '\\' && i+1 < len(v) {
							i++ // a quoted-pair; no address holds one, so it stays malformed
						}
						i++
					}
					val = v[vs:i]
					for i < len(v) && v[i] != ';' && v[i] != ',' {
						i++ // the closing quote and any junk after it
					}
				} else {
					vs := i
					for i < len(v) && v[i] != ';' && v[i] != ',' {
						i++
					}
					val = strings.TrimSpace(v[vs:i])
				}
			}
			if !seen && strings.EqualFold(key, "for") {
				forVal, seen = val, true
			}
		}
		if nonEmpty {
			f(forVal)
		}
		if i >= len(v) {
			return
		}
		i++ // past ','
	}
}

// parseForwardedNode parses an RFC 7239 node: "192.0.2.1", "192.0.2.1:80",
// "[2001:db8::1]", "[2001:db8::1]:80". "unknown" and obfuscated
// identifiers ("_hidden") are not addresses.
func parseForwardedNode(s string) (netip.Addr, bool) {
	return parseHostPort(s)
}

// parseHostPort parses an address with or without a port, IPv6 with or
// without brackets, and drops any zone and IPv4-mapping. It also returns
// the text it parsed as the address (a substring of s).
func parseHostPort(s string) (netip.Addr, bool) {
	a, _, ok := parseHostPortText(s)
	return a, ok
}

func parseHostPortText(s string) (netip.Addr, string, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return netip.Addr{}, "", false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", false
		}
		rest := s[end+1:]
		if rest != "" && (rest[0] != ':' || !allDigits(rest[1:])) {
			return netip.Addr{}, "", false
		}
		s = s[1:end]
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		// One colon: IPv4 with a port.
		if !allDigits(s[i+1:]) {
			return netip.Addr{}, "", false
		}
		s = s[:i]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, "", false
	}
	return a.WithZone("").Unmap(), s, true
}

func allDigits(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Key is a KeyFunc: the client's address as text ("203.0.113.7",
// "2001:db8::1"), or its IPv6 network ("2001:db8:1:2::/64") when
// IPv6PrefixBits says so.
func (c *ClientIP) Key(r *http.Request) (string, error) {
	if c == nil || len(c.trusted) == 0 {
		if host, ok := peerIPv4(r.RemoteAddr); ok {
			return host, nil
		}
	}
	a, text, err := c.addr(r)
	if err != nil {
		return "", err
	}
	if c != nil && c.v6bits > 0 && c.v6bits < 128 && a.Is6() {
		p, err := a.Prefix(c.v6bits)
		if err == nil {
			return p.String(), nil
		}
	}
	// The common case, the peer "1.2.3.4:5678" itself, needs no new string:
	// netip accepts only canonical dotted quads, so the text that parsed as
	// the IPv4 address a is already its canonical form.
	if text != "" && a.Is4() && strings.IndexByte(text, ':') < 0 {
		return text, nil
	}
	return a.String(), nil
}

// peerIPv4 returns the host of a peer address that is a canonical IPv4
// address with a port ("192.0.2.7:5555"), the common case, checked in one
// pass without building a netip.Addr. Anything else is not ok and takes
// the general path, which gives the same key for what this accepts: the
// text of a dotted quad netip accepts (four decimal fields of 0-255
// without leading zeros) is its canonical form.
func peerIPv4(s string) (string, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < len("0.0.0.0") || i > len("255.255.255.255") || !allDigits(s[i+1:]) {
		return "", false
	}
	host := s[:i]
	dots, n, digits := 0, 0, 0
	for j := 0; j < len(host); j++ {
		switch c := host[j]; {
		case c >= '0' && c <= '9':
			if digits == 1 && n == 0 {
				return "", false // a leading zero
			}
			n = n*10 + int(c-'0')
			digits++
			if n > 255 {
				return "", false
			}
		case c == '.':
			if digits == 0 {
				return "", false
			}
			dots++
			n, digits = 0, 0
		default:
			return "", false
		}
	}
	if dots != 3 || digits == 0 {
		return "", false
	}
	return host, true
}
