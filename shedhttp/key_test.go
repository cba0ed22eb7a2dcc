package shedhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/shedhttp"
)

func reqWith(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestKeyHeader(t *testing.T) {
	k := shedhttp.KeyHeader("x-api-key")
	if got, err := k(reqWith("", "X-API-Key", "  ak_123 ")); err != nil || got != "h:x-api-key:ak_123" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := k(reqWith("")); !errors.Is(err, shedhttp.ErrNoKey) {
		t.Errorf("missing header: %v, want ErrNoKey", err)
	}
	if _, err := k(reqWith("", "X-API-Key", "   ")); !errors.Is(err, shedhttp.ErrNoKey) {
		t.Errorf("blank header: %v, want ErrNoKey", err)
	}
	if _, err := k(reqWith("", "X-API-Key", strings.Repeat("a", shedhttp.MaxKeyPart+1))); !errors.Is(err, shedhttp.ErrKeyTooLong) {
		t.Errorf("long header: %v, want ErrKeyTooLong", err)
	}
	// A header value that spells an IP address cannot take that IP's key.
	if got, _ := k(reqWith("", "X-API-Key", "192.0.2.1")); got == "192.0.2.1" {
		t.Error("a header key collides with an IP key")
	}
}

func TestKeyBearer(t *testing.T) {
	k := shedhttp.KeyBearer()
	a, err := k(reqWith("", "Authorization", "Bearer tok_secret"))
	if err != nil || !strings.HasPrefix(a, "bearer:") || len(a) != len("bearer:")+32 || strings.Contains(a, "tok_secret") {
		t.Fatalf("got %q, %v: want bearer: and 32 hex digits, not the token", a, err)
	}
	b, _ := k(reqWith("", "Authorization", "bearer \t tok_secret"))
	if a != b {
		t.Errorf("scheme case or spacing changed the key: %q vs %q", a, b)
	}
	c, _ := k(reqWith("", "Authorization", "Bearer tok_other"))
	if a == c {
		t.Error("two tokens share a key")
	}
	for _, v := range []string{"", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearertok", "B"} {
		if _, err := k(reqWith("", "Authorization", v)); !errors.Is(err, shedhttp.ErrNoKey) {
			t.Errorf("%q: %v, want ErrNoKey", v, err)
		}
	}
	if _, err := k(reqWith("", "Authorization", "Bearer "+strings.Repeat("t", shedhttp.MaxKeyPart+1))); !errors.Is(err, shedhttp.ErrKeyTooLong) {
		t.Errorf("long token: %v", err)
	}
}

func TestKeyHashAndFrom(t *testing.T) {
	k := shedhttp.KeyHash(shedhttp.KeyHeader("X-API-Key"))
	got, err := k(reqWith("", "X-API-Key", "sk_live_1"))
	if err != nil || !strings.HasPrefix(got, "hash:") || strings.Contains(got, "sk_live") {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := k(reqWith("")); !errors.Is(err, shedhttp.ErrNoKey) {
		t.Errorf("KeyHash hid the error: %v", err)
	}
	from := shedhttp.KeyFrom(func(r *http.Request) string { return r.URL.Query().Get("tenant") })
	r := httptest.NewRequest("GET", "/?tenant=acme", nil)
	if got, err := from(r); err != nil || got != "acme" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := from(httptest.NewRequest("GET", "/", nil)); !errors.Is(err, shedhttp.ErrNoKey) {
		t.Errorf("empty: %v", err)
	}
}

func TestKeyCombineIsUnambiguous(t *testing.T) {
	parts := func(vals ...string) shedhttp.KeyFunc {
		fs := make([]shedhttp.KeyFunc, len(vals))
		for i, v := range vals {
			fs[i] = shedhttp.KeyFrom(func(*http.Request) string { return v })
		}
		return shedhttp.KeyCombine(fs...)
	}
	r := reqWith("")
	seen := map[string][]string{}
	for _, vals := range [][]string{
		{"a|b", "c"}, {"a", "b|c"}, {"a\\", "|c"}, {"a\\|", "c"}, {"a", "b", "c"}, {"a|b|c"}, {"a\\|b", "c"},
	} {
		k, err := parts(vals...)(r)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q both give key %q", prev, vals, k)
		}
		seen[k] = vals
	}
	combined := shedhttp.KeyCombine(shedhttp.KeyHeader("X-API-Key"), shedhttp.KeyClientIP(nil))
	if got, err := combined(reqWith("203.0.113.5:80", "X-API-Key", "k1")); err != nil || got != "h:x-api-key:k1|203.0.113.5" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := combined(reqWith("203.0.113.5:80")); !errors.Is(err, shedhttp.ErrNoKey) {
		t.Errorf("a missing part: %v, want ErrNoKey", err)
	}
}

func mustClientIP(t testing.TB, header string, trusted ...string) *shedhttp.ClientIP {
	t.Helper()
	c, err := shedhttp.NewClientIP(shedhttp.ClientIPConfig{TrustedProxies: trusted, Header: header})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientIP(t *testing.T) {
	xff := mustClientIP(t, "", "10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.99")
	fwd := mustClientIP(t, "Forwarded", "10.0.0.0/8")
	none := mustClientIP(t, "")
	for _, tc := range []struct {
		name string
		c    *shedhttp.ClientIP
		req  *http.Request
		want string
	}{
		{"nil trusts nobody", nil, reqWith("203.0.113.1:9", "X-Forwarded-For", "1.1.1.1"), "203.0.113.1"},
		{"no proxies configured", none, reqWith("203.0.113.1:9", "X-Forwarded-For", "1.1.1.1"), "203.0.113.1"},
		{"untrusted peer's header ignored", xff, reqWith("203.0.113.1:9", "X-Forwarded-For", "1.1.1.1"), "203.0.113.1"},
		{"trusted peer, one hop", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "198.51.100.4"), "198.51.100.4"},
		{"spoofed left entries skipped", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "6.6.6.6, 198.51.100.4, 10.1.2.3"), "198.51.100.4"},
		{"several header lines", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "6.6.6.6, 198.51.100.4", "X-Forwarded-For", "10.9.9.9"), "198.51.100.4"},
		{"single trusted address", xff, reqWith("192.0.2.99:9", "X-Forwarded-For", "198.51.100.4"), "198.51.100.4"},
		{"all hops trusted: leftmost", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "10.0.0.7, 10.0.0.8"), "10.0.0.7"},
		{"malformed hop: last good", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "1.1.1.1, garbage, 10.0.0.8"), "10.0.0.8"},
		{"empty elements skipped", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", " , 198.51.100.4 ,, "), "198.51.100.4"},
		{"no header", xff, reqWith("10.0.0.1:9"), "10.0.0.1"},
		{"hop with port", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "198.51.100.4:1234"), "198.51.100.4"},
		{"ipv6 peer and hop", xff, reqWith("[2001:db8:ffff::1]:9", "X-Forwarded-For", "2001:db8::7"), "2001:db8::7"},
		{"ipv6 hop in brackets with port", xff, reqWith("10.0.0.1:9", "X-Forwarded-For", "[2001:db8::7]:443"), "2001:db8::7"},
		{"ipv4-mapped peer", xff, reqWith("[::ffff:10.0.0.1]:9", "X-Forwarded-For", "::ffff:198.51.100.4"), "198.51.100.4"},
		{"zone dropped", nil, reqWith("[fe80::1%eth0]:9"), "fe80::1"},
		{"forwarded", fwd, reqWith("10.0.0.1:9", "Forwarded", `for=6.6.6.6, for=198.51.100.4;proto=https, for=10.0.0.5;by=10.0.0.1`), "198.51.100.4"},
		{"forwarded quoted ipv6", fwd, reqWith("10.0.0.1:9", "Forwarded", `For="[2001:db8:cafe::17]:4711"`), "2001:db8:cafe::17"},
		{"forwarded quoted comma", fwd, reqWith("10.0.0.1:9", "Forwarded", `for=198.51.100.4;note="a, for=6.6.6.6"`), "198.51.100.4"},
		{"forwarded unknown", fwd, reqWith("10.0.0.1:9", "Forwarded", `for=1.1.1.1, for=unknown, for=10.0.0.3`), "10.0.0.3"},
		{"forwarded obfuscated", fwd, reqWith("10.0.0.1:9", "Forwarded", `for=_hidden`), "10.0.0.1"},
		{"forwarded element without for", fwd, reqWith("10.0.0.1:9", "Forwarded", `for=198.51.100.4, proto=http`), "10.0.0.1"},
		{"xff ignored in forwarded mode", fwd, reqWith("10.0.0.1:9", "X-Forwarded-For", "198.51.100.4"), "10.0.0.1"},
	} {
		got, err := tc.c.Addr(tc.req)
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: got %v, %v, want %s", tc.name, got, err, tc.want)
		}
	}
	for _, remote := range []string{"", "@", "pipe", "1.2.3.4:abc", "[::1"} {
		if _, err := xff.Addr(reqWith(remote)); !errors.Is(err, shedhttp.ErrNoKey) {
			t.Errorf("peer %q: %v, want ErrNoKey", remote, err)
		}
	}
}

func TestClientIPHonoursCustomHeader(t *testing.T) {
	c := mustClientIP(t, "x-real-ip", "10.0.0.0/8")
	if got, _ := c.Addr(reqWith("10.0.0.1:1", "X-Real-Ip", "198.51.100.4")); got.String() != "198.51.100.4" {
		t.Errorf("got %v", got)
	}
	if !c.Trusted(netip.MustParseAddr("::ffff:10.1.1.1")) {
		t.Error("an IPv4-mapped proxy address is not trusted")
	}
}

// TestForwardedUnclosedQuoteCannotHideTheProxysElement is a bug found once:
// a client opens a quoted string it never closes, a trusted proxy appends
// its own element to the same line (nginx's "$http_forwarded,
// $proxy_forwarded_elem"), and the open quote must not swallow the
// proxy's element, whether that element is quoted (IPv6) or not.
func TestForwardedUnclosedQuoteCannotHideTheProxysElement(t *testing.T) {
	fwd := mustClientIP(t, "Forwarded", "10.0.0.0/8")
	for _, tc := range []struct{ sent, appended, want string }{
		{`for=6.6.6.6;x="`, `for=203.0.113.5`, "203.0.113.5"},
		{`for=6.6.6.6;x="`, `for="[2001:db8::5]:4711"`, "2001:db8::5"},
		{`for="6.6.6.6`, `for=203.0.113.5`, "203.0.113.5"},
		{`for=6.6.6.6;x="a\"`, `for=203.0.113.5;proto=https`, "203.0.113.5"},
		{`for=6.6.6.6, for="`, `for="203.0.113.5"`, "203.0.113.5"},
		// Well-formed quoted strings holding commas still parse.
		{`for=6.6.6.6;x="a,b"`, `for=10.1.1.1`, "6.6.6.6"},
	} {
		r := reqWith("10.0.0.1:443", "Forwarded", tc.sent+", "+tc.appended)
		a, err := fwd.Addr(r)
		if err != nil || a.String() != tc.want {
			t.Errorf("Forwarded: %s, %s: client %v, %v; want %s", tc.sent, tc.appended, a, err, tc.want)
		}
	}
}

// FuzzClientIP feeds arbitrary headers and peers to both header modes. Its
// oracle: an element (or list entry) a trusted proxy appends after
// whatever the client sent is never hidden by it. The proxy at 10.0.0.1
// appends the address of the peer it saw, 203.0.113.7 (untrusted), so the
// client is 203.0.113.7 whatever the client's part holds.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 10.0.0.2", `for=1.2.3.4;proto=http, for="[::1]:80"`)
	f.Add("[2001:db8::1]:443", "[2001:db8::2]:80,, ,", `for="unterminated`)
	f.Add("10.0.0.1", "\x00,\xff,::ffff:1.2.3.4", `;;;=,=;for=;for="\"`)
	f.Add("", ",,,,", `for="[fe80::1%25eth0]";by=x`)
	f.Add("10.0.0.1:1", strings.Repeat("10.0.0.9,", 100), strings.Repeat("for=10.0.0.9,", 100))
	f.Add("10.0.0.1:1", `6.6.6.6, "`, `for=6.6.6.6;x="`)
	xff := mustClientIP(f, "", "10.0.0.0/8", "::/0")
	fwd := mustClientIP(f, "Forwarded", "10.0.0.0/8", "::/0")
	fwd4 := mustClientIP(f, "Forwarded", "10.0.0.0/8")
	f.Fuzz(func(t *testing.T, remote, xffVal, fwdVal string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{
			"X-Forwarded-For": {xffVal}, "Forwarded": {fwdVal},
		}}
		for _, c := range []*shedhttp.ClientIP{xff, fwd} {
			a, err := c.Addr(r)
			if err != nil {
				if !errors.Is(err, shedhttp.ErrNoKey) {
					t.Fatalf("unexpected error %v", err)
				}
				continue
			}
			if !a.IsValid() {
				t.Fatalf("invalid address without an error")
			}
			if k, err := c.Key(r); err != nil || k == "" {
				t.Fatalf("Key = %q, %v after Addr succeeded", k, err)
			}
		}
		// The oracle: a trusted proxy appends its element to the client's line.
		const client = "203.0.113.7"
		appended := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{
			"X-Forwarded-For": {xffVal + ", " + client},
			"Forwarded":       {fwdVal + ", for=" + client},
		}}
		for _, c := range []*shedhttp.ClientIP{xff, fwd} {
			if a, err := c.Addr(appended); err != nil || a.String() != client {
				t.Fatalf("client's part %q / %q hid the proxy's element: client %v, %v; want %s",
					xffVal, fwdVal, a, err, client)
			}
		}
		quoted := &http.Request{RemoteAddr: "10.0.0.1:443", Header: http.Header{
			"Forwarded": {fwdVal + `, for="[2001:db8::7]:1"`},
		}}
		if a, err := fwd4.Addr(quoted); err != nil || a.String() != "2001:db8::7" {
			t.Fatalf("client's part %q hid the proxy's quoted element: client %v, %v", fwdVal, a, err)
		}
		_, _ = shedhttp.KeyBearer()(&http.Request{Header: http.Header{"Authorization": {xffVal}}})
		_, _ = shedhttp.KeyCombine(shedhttp.KeyHeader("Forwarded"), shedhttp.KeyClientIP(xff))(r)
	})
}

func TestClientIPv6Prefix(t *testing.T) {
	c, err := shedhttp.NewClientIP(shedhttp.ClientIPConfig{IPv6PrefixBits: 64})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Key(reqWith("[2001:db8:1:2:aaaa::1]:443"))
	b, _ := c.Key(reqWith("[2001:db8:1:2:bbbb::9]:443"))
	if a != "2001:db8:1:2::/64" || a != b {
		t.Errorf("keys %q and %q, want both 2001:db8:1:2::/64", a, b)
	}
	if k, _ := c.Key(reqWith("192.0.2.1:80")); k != "192.0.2.1" {
		t.Errorf("IPv4 key %q", k)
	}
	if _, err := shedhttp.NewClientIP(shedhttp.ClientIPConfig{IPv6PrefixBits: 129}); err == nil || !strings.Contains(err.Error(), "IPv6PrefixBits") {
		t.Errorf("129 bits: %v", err)
	}
}
