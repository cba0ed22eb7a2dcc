// Package clientip finds the client's address of a request behind
// trusted proxies. The HTTP and gRPC front ends both key requests on it
// and must believe exactly the same proxies the same way, so the rules
// live here once: the peer is the client unless it is a trusted proxy, in
// which case the one header the proxies write is walked from the right.
package clientip

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"
)

// Config says whom to believe about the client's address; the front ends
// document its fields (shedhttp.ClientIPConfig has the same ones).
type Config struct {
	TrustedProxies []string
	Header         string
	IPv6PrefixBits int
}

// Resolver resolves a client address from a peer address and the values
// of the proxies' header. A nil *Resolver trusts no proxy. It is safe for
// concurrent use.
type Resolver struct {
	trusted   []netip.Prefix
	header    string
	forwarded bool
	v6bits    int
}

// maxHops bounds how many proxy hops a Resolver walks through, so that a
// header of a million commas costs a bounded amount of work.
const maxHops = 64

// New checks cfg and builds a Resolver. Errors start with pkg ("shedhttp")
// and name field ("Config.ClientIP"), as the front end's caller knows it.
func New(cfg Config, pkg, field string) (*Resolver, error) {
	c := &Resolver{header: "X-Forwarded-For"}
	if cfg.Header != "" {
		c.header = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(cfg.Header))
		if !validHeaderName(c.header) {
			return nil, fmt.Errorf("%s: %s.Header %q is not a valid header name", pkg, field, cfg.Header)
		}
	}
	c.forwarded = c.header == "Forwarded"
	if cfg.IPv6PrefixBits < 0 || cfg.IPv6PrefixBits > 128 {
		return nil, fmt.Errorf("%s: %s.IPv6PrefixBits must be within [0, 128], got %d", pkg, field, cfg.IPv6PrefixBits)
	}
	c.v6bits = cfg.IPv6PrefixBits
	trusted, err := ParsePrefixes(cfg.TrustedProxies, pkg, field+".TrustedProxies")
	if err != nil {
		return nil, err
	}
	c.trusted = trusted
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
func (c *Resolver) Trusted(a netip.Addr) bool {
	if c == nil {
		return false
	}
	return Contains(c.trusted, a)
}

// Header is the canonical name of the header the proxies write.
func (c *Resolver) Header() string {
	if c == nil {
		return ""
	}
	return c.header
}

// Trusting reports whether any proxy is trusted: when none is, the header
// is never read, and callers need not look it up.
func (c *Resolver) Trusting() bool { return c != nil && len(c.trusted) > 0 }

// Addr returns the client's address: the peer's, unless the peer is a
// trusted proxy, in which case the proxies' header is walked from right to
// left, skipping trusted hops, and the first untrusted address is the
// client. When every hop is trusted, the leftmost one is the client; when a
// hop is malformed (or "unknown"), the last good hop to its right is. It
// is not ok when the peer address itself is not an IP (a Unix socket,
// say). vals are the values of the Header field; it never panics, whatever
// they hold.
func (c *Resolver) Addr(peer string, vals []string) (netip.Addr, bool) {
	a, _, ok := c.addr(peer, vals)
	return a, ok
}

// addr is Addr, also returning the peer's address text when the client is
// the peer ("" otherwise).
func (c *Resolver) addr(peerText string, vals []string) (netip.Addr, string, bool) {
	peer, text, ok := parseHostPortText(peerText)
	if !ok {
		return netip.Addr{}, "", false
	}
	if a := c.Client(peer, vals); a != peer {
		return a, "", true
	}
	return peer, text, true
}

// Client is Addr for a peer address already parsed (a gRPC peer's):
// the client's address, through the trusted proxies.
func (c *Resolver) Client(peer netip.Addr, vals []string) netip.Addr {
	peer = peer.WithZone("").Unmap()
	if c == nil || len(c.trusted) == 0 || !c.Trusted(peer) || len(vals) == 0 {
		return peer
	}
	if c.forwarded {
		return c.walkForwarded(vals, peer)
	}
	return c.walkList(vals, peer)
}

// walkList walks comma-separated address lists right to left; empty list
// elements are skipped, as HTTP list syntax allows them.
func (c *Resolver) walkList(vals []string, last netip.Addr) netip.Addr {
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

// walkForwarded walks RFC 7239 Forwarded elements right to left.
//
// Elements are split from the right, too: the elements trusted proxies
// appended are the last ones, and well formed, so they are read exactly
// as written whatever the client put before them. Split from the left, a
// quoted string the client opens and never closes (for=6.6.6.6;x=") would
// run over the proxy's element, or pair with the quote of a proxy's
// quoted IPv6 node, and hide it. An element whose quotes do not
// balance is malformed: the walk stops there, at the last good hop.
func (c *Resolver) walkForwarded(vals []string, last netip.Addr) netip.Addr {
	hops := 0
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		end := len(v)
		for {
			start, balanced := prevForwardedElement(v, end)
			if elem := v[start:end]; strings.TrimSpace(elem) != "" {
				val, ok := forwardedFor(elem)
				if !balanced || !ok {
					return last
				}
				a, ok := parseForwardedNode(val)
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
			if start == 0 {
				break
			}
			end = start - 1 // before the ','
		}
	}
	return last
}

// prevForwardedElement returns where the element of v that ends at end
// starts: after the nearest comma to its left outside a quoted string.
// balanced is false when the element's quotes do not pair up (only the
// leftmost element of a line can be so).
func prevForwardedElement(v string, end int) (start int, balanced bool) {
	quoted := false
	for j := end - 1; j >= 0; j-- {
		switch v[j] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				return j + 1, true
			}
		}
	}
	return 0, !quoted
}

// forwardedFor returns the for= value of one Forwarded element, quotes
// removed ("" when it has none). ok is false when a quoted string in the
// element is not closed (a quoted-pair may escape what looked like its
// closing quote). Malformed input yields odd values, never a panic or an
// endless loop: every step moves i forward.
func forwardedFor(elem string) (forVal string, ok bool) {
	seen := false
	i := 0
	for i < len(elem) {
		if c := elem[i]; c == ' ' || c == '\t' || c == ';' {
			i++
			continue
		}
		ks := i
		for i < len(elem) && elem[i] != '=' && elem[i] != ';' {
			i++
		}
		key := strings.TrimSpace(elem[ks:i])
		val := ""
		if i < len(elem) && elem[i] == '=' {
			i++
			if i < len(elem) && elem[i] == '"' {
				i++
				vs := i
				for i < len(elem) && elem[i] != '"' {
					if elem[i] == '\\' {
						i++ // a quoted-pair; no address holds one, so the value stays malformed
					}
					i++
				}
				if i >= len(elem) {
					return "", false // never closed
				}
				val = elem[vs:i]
				for i < len(elem) && elem[i] != ';' {
					i++ // the closing quote and any junk after it
				}
			} else {
				vs := i
				for i < len(elem) && elem[i] != ';' {
					i++
				}
				val = strings.TrimSpace(elem[vs:i])
			}
		}
		if !seen && strings.EqualFold(key, "for") {
			forVal, seen = val, true
		}
	}
	return forVal, true
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

// Key is the client's address as text ("203.0.113.7", "2001:db8::1"), or
// its IPv6 network ("2001:db8:1:2::/64") when IPv6PrefixBits says so; not
// ok as for Addr.
func (c *Resolver) Key(peer string, vals []string) (string, bool) {
	if c == nil || len(c.trusted) == 0 {
		if host, ok := peerIPv4(peer); ok {
			return host, true
		}
	}
	a, text, ok := c.addr(peer, vals)
	if !ok {
		return "", false
	}
	if c != nil && c.v6bits > 0 && c.v6bits < 128 && a.Is6() {
		return c.KeyOf(a), true
	}
	// The common case, the peer "1.2.3.4:5678" itself, needs no new string:
	// netip accepts only canonical dotted quads, so the text that parsed as
	// the IPv4 address a is already its canonical form.
	if text != "" && a.Is4() && strings.IndexByte(text, ':') < 0 {
		return text, true
	}
	return a.String(), true
}

// KeyOf is Key for a client address already resolved (Client).
func (c *Resolver) KeyOf(a netip.Addr) string {
	if c != nil && c.v6bits > 0 && c.v6bits < 128 && a.Is6() {
		if p, err := a.Prefix(c.v6bits); err == nil {
			return p.String()
		}
	}
	return a.String()
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

// ParsePrefixes parses CIDRs ("10.0.0.0/8") or single addresses, as
// trusted proxies and trusted peers are written. Errors start with pkg and
// name the element of field ("Config.TrustedPeers[2]").
func ParsePrefixes(list []string, pkg, field string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
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
			return nil, fmt.Errorf("%s: %s[%d] %q is not a CIDR or an IP address: %w", pkg, field, i, list[i], err)
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%s: %s[%d] %q must not have a zone", pkg, field, i, list[i])
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
		out = append(out, p)
	}
	return out, nil
}

// Contains reports whether a (unmapped) is in one of prefixes.
func Contains(prefixes []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
