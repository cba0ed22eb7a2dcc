package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/shed"
)

// Descriptor is one key/value entry of a rule's key, as in Lyft's
// envoyproxy/ratelimit configuration. Key names the entry; the value comes
// from the request: by name for the built-in keys "key" (Request.Key),
// "route" (Request.Route) and "priority" (Request.Priority's word), or from
// From for any other name. When Value is set, the rule applies only to
// requests whose value equals it (a per-route limit for "POST /v1/charges").
//
// A request whose value for an entry is empty is not counted by the rule:
// a per-user rule does not apply to anonymous requests, so pair it with a
// per-IP rule.
type Descriptor struct {
	// Key names the entry. Required.
	Key string
	// Value, when set, restricts the rule to requests with this value.
	Value string
	// From returns the entry's value for a request; nil for the built-in
	// keys. It must be quick and safe for concurrent use; values the layer
	// cannot see in shed.Request (a client IP, a user ID) reach it through
	// ctx.
	From func(ctx context.Context, req shed.Request) string
}

// Descriptor builders for the common cases.
var (
	// ByClient counts per client key (Request.Key).
	ByClient = Descriptor{Key: "key"}
	// ByRoute counts per route pattern (Request.Route).
	ByRoute = Descriptor{Key: "route"}
)

// RouteIs restricts a rule to one route pattern ("POST /v1/charges").
func RouteIs(route string) Descriptor { return Descriptor{Key: "route", Value: route} }

// By counts per the value f returns, under the entry name key.
func By(key string, f func(ctx context.Context, req shed.Request) string) Descriptor {
	return Descriptor{Key: key, From: f}
}

// Rule is one limit applied to the requests it matches, counted per
// distinct value of its descriptors. A layer holds several (per IP and per
// user, per route and per key); a request must pass all that apply to it.
type Rule struct {
	// Name names the rule: the policy in the RateLimit headers and
	// rejections, and part of its keys. Required; letters, digits, '-', '_'
	// and '.', at most 64 bytes, unique within a layer.
	Name string
	// Domain groups rules as envoyproxy/ratelimit's domain does ("api");
	// optional, part of the keys.
	Domain string
	// Descriptors say what the rule counts per, in order. Required, 1 to
	// MaxDescriptors entries.
	Descriptors []Descriptor
	// Store enforces the limit: a *Memory, a Redis-backed limiter, any
	// Store. Required. When a rule is the only one of its layer using its
	// limiter and counts per one entry, the limiter sees that entry's value
	// as the key (escaped, or digested when long); otherwise keys carry the
	// domain, the rule's name and every entry, so rules may share a limiter.
	// Do not share one limiter between layers.
	Store Store
	// Overage is what the Soft and Elastic modes take units from once
	// Store is exhausted, per key. Nil: the layer builds an in-memory
	// limiter of the same algorithm sized to the overage
	// (Enforcement.Ceiling(Quantity) − Quantity per Period). With a shared
	// (Redis) Store, give a shared Overage too, sized by Limit.Overage, or
	// each instance allows its own overage.
	Overage Store
}

// MaxDescriptors is the most entries one rule may have.
const MaxDescriptors = 8

// MaxRuleKeyBytes is the longest key a rule hands its limiter: longer keys
// are replaced by '#' and a SHA-256 digest (44 bytes).
const MaxRuleKeyBytes = 200

type source uint8

const (
	fromFunc source = iota
	fromKey
	fromRoute
	fromPriority
)

// compiledRule is a Rule checked and ready to build keys.
type compiledRule struct {
	Rule
	sources []source
	prefix  []byte // escaped length-prefixed domain and name
	bare    bool   // the key is the only entry's value alone
	limit   Limit
	alg     Algorithm
	decider FallbackDecider // Store, when it tells fallback decisions apart
	// ownOverage is the overage limiter the layer built (and closes).
	ownOverage *Memory
	// ownStore is the store PerKey built (and the layer closes).
	ownStore *Memory
}

func compileRule(i int, r Rule) (*compiledRule, error) {
	field := "Config.Rules[" + strconv.Itoa(i) + "]"
	var errs []error
	if !ratefield.ValidPolicyName(r.Name) {
		errs = append(errs, fmt.Errorf("ratelimit: %s.Name %q must be 1 to 64 letters, digits, '-', '_' or '.'", field, r.Name))
	}
	if r.Store == nil {
		errs = append(errs, fmt.Errorf("ratelimit: %s.Store is required", field))
	}
	if n := len(r.Descriptors); n == 0 || n > MaxDescriptors {
		errs = append(errs, fmt.Errorf("ratelimit: %s.Descriptors must have 1 to %d entries, got %d", field, MaxDescriptors, n))
	}
	c := &compiledRule{Rule: r}
	c.Descriptors = append([]Descriptor(nil), r.Descriptors...)
	for j, d := range c.Descriptors {
		s := fromFunc
		if d.From == nil {
			switch d.Key {
			case "key":
				s = fromKey
			case "route":
				s = fromRoute
			case "priority":
				s = fromPriority
			default:
				errs = append(errs, fmt.Errorf("ratelimit: %s.Descriptors[%d] (%q) needs From: only \"key\", \"route\" and \"priority\" are built in", field, j, d.Key))
			}
		}
		if d.Key == "" {
			errs = append(errs, fmt.Errorf("ratelimit: %s.Descriptors[%d].Key is required", field, j))
		}
		c.sources = append(c.sources, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.limit = r.Store.Limit()
	c.alg = r.Store.Algorithm()
	c.decider, _ = r.Store.(FallbackDecider)
	var pre []byte
	pre = appendPart(pre, r.Domain)
	pre = appendPart(pre, r.Name)
	c.prefix = pre
	return c, nil
}

// value returns descriptor j's value for req, and whether the rule applies.
func (c *compiledRule) value(ctx context.Context, req *shed.Request, j int) (string, bool) {
	d := &c.Descriptors[j]
	var v string
	switch c.sources[j] {
	case fromKey:
		v = req.Key
	case fromRoute:
		v = req.Route
	case fromPriority:
		v = req.Priority.String()
	default:
		v = d.From(ctx, *req)
	}
	if v == "" || d.Value != "" && v != d.Value {
		return "", false
	}
	return v, true
}

// key builds the rule's key for req, and reports whether the rule applies.
//
// Keys are injective: each part is length-prefixed ("5:route"), so that
// "a:b"+"c" and "a"+"b:c" differ, and then escaped (bytes outside '!'..'~'
// and '%', '#', '{', '}' become %XX), so they hold no space, newline or
// brace and cannot reach another namespace in Redis. A key longer than
// MaxRuleKeyBytes becomes '#' and its SHA-256, which no escaped key can
// equal since escaped keys hold no '#'. A bare key (see Rule.Store) whose
// value needs no escaping is the value itself, without allocating.
func (c *compiledRule) key(ctx context.Context, req *shed.Request) (string, bool) {
	if c.bare {
		v, ok := c.value(ctx, req, 0)
		if !ok {
			return "", false
		}
		if len(v) <= MaxRuleKeyBytes && clean(v) {
			return v, true
		}
		var buf [MaxRuleKeyBytes + 1]byte
		return bounded(appendEscaped(buf[:0], v)), true
	}
	var buf [MaxRuleKeyBytes + 1]byte
	b := append(buf[:0], c.prefix...)
	for j := range c.Descriptors {
		v, ok := c.value(ctx, req, j)
		if !ok {
			return "", false
		}
		b = appendPart(b, c.Descriptors[j].Key)
		b = appendPart(b, v)
	}
	return bounded(b), true
}

func bounded(b []byte) string {
	if len(b) > MaxRuleKeyBytes {
		return digestKey(string(b))
	}
	return string(b)
}

// appendPart appends len(s), ':' and s, escaped.
func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return appendEscaped(b, s)
}

// escaped marks the bytes keys escape: a table, because clean runs over
// every bare key on every request.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = c <= ' ' || c >= 0x7f || c == '%' || c == '#' || c == '{' || c == '}'
	}
	return t
}()

func needsEscape(c byte) bool { return escaped[c] }

func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] {
			return false
		}
	}
	return true
}

func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// digestKey returns '#' and the unpadded base64url SHA-256 of key (44 bytes).
func digestKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b [1 + 43]byte
	b[0] = '#'
	base64.RawURLEncoding.Encode(b[1:], sum[:])
	return string(b[:])
}
