package config

// Building a rate-limit layer from its section: the one file to change
// when ratelimit's API does.

import (
	"fmt"

	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// shadowSuffix ends the name of the layer that holds a section's rules in
// shadow mode.
const shadowSuffix = "-shadow"

func (r *RateLimit) layerName() string {
	if r.Name != "" {
		return r.Name
	}
	return ratelimit.DefaultName
}

// rateLimit builds the section's layer, and before it a dry-run layer for
// its rules in shadow mode (when some are and the section is not in dry
// run as a whole): a shadow rule counts every request that reaches the
// rate limits, records the ones it would reject, and rejects none.
func (b *builder) rateLimit(r *RateLimit) ([]shed.Layer, error) {
	var enforcing, shadow []ratelimit.Rule
	for _, ru := range r.rules("") {
		lim, err := b.limiter(r, &ru)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", ru.name, err)
		}
		rule := ratelimit.Rule{Name: ru.name, Domain: r.Domain, Descriptors: b.descriptors(ru.entries), Store: lim}
		if ru.shadow && !r.DryRun {
			shadow = append(shadow, rule)
		} else {
			enforcing = append(enforcing, rule)
		}
	}
	enf := b.enforcement(&r.Enforcement)
	var out []shed.Layer
	if len(shadow) > 0 {
		dry := enf
		dry.DryRun = true
		l, err := b.rateLimitLayer(r.layerName()+shadowSuffix, shadow, dry, r.MaxKeys)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	if len(enforcing) > 0 {
		l, err := b.rateLimitLayer(r.layerName(), enforcing, enf, r.MaxKeys)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func (b *builder) rateLimitLayer(name string, rules []ratelimit.Rule, enf shed.Enforcement, maxKeys int) (shed.Layer, error) {
	l, err := ratelimit.New(ratelimit.Config{Name: name, Rules: rules, Enforcement: enf, Clock: b.opts.Clock, MaxKeys: maxKeys})
	if err != nil {
		return nil, err
	}
	// Never carried over: its soft episodes and queues start afresh, the
	// counts live in the limiters.
	b.out.parts = append(b.out.parts, newPart(l, l.Close))
	return l, nil
}

func (b *builder) descriptors(entries []Descriptor) []ratelimit.Descriptor {
	out := make([]ratelimit.Descriptor, len(entries))
	for i, e := range entries {
		out[i] = ratelimit.Descriptor{Key: e.Key, Value: e.Value}
		switch e.Key {
		case "key", "route", "priority":
		default:
			out[i].From = b.opts.Descriptors[e.Key]
		}
	}
	return out
}

// limiter returns the rule's store: the previous build's when the rule,
// its layer's name, store and Redis settings are unchanged, so its counts
// survive a reload.
func (b *builder) limiter(r *RateLimit, ru *rule) (ratelimit.Store, error) {
	limit := ru.rate.limit()
	alg := ru.rate.Algorithm
	if r.Store == RedisStore && !b.opts.MemoryOnly {
		client, clientKey, err := b.redis()
		if err != nil {
			return nil, err
		}
		prefix := r.Prefix
		if prefix == "" {
			prefix = ratelimit.DefaultRedisPrefix
		}
		// Each rule its own prefix: two rules counting per the same entry
		// must not share keys.
		prefix += r.layerName() + ":" + ru.name + ":"
		var rc Redis
		if b.f.Redis != nil {
			rc = *b.f.Redis
		}
		key := fmt.Sprintf("ratelimit-redis %s|%s|%s|%+v|%v|%v|%s", prefix, r.Domain, ru.name, ru.entries, alg, limit, clientKey)
		v, err := b.part(key, func() (any, func() error, error) {
			l, err := ratelimit.NewRedis(client, alg, limit, ratelimit.RedisConfig{
				Prefix: prefix, Timeout: rc.Timeout, ProbeInterval: rc.ProbeInterval,
				ExpectedInstances: rc.ExpectedInstances, Clock: b.opts.Clock,
			})
			if err != nil {
				return nil, nil, err
			}
			return l, l.Close, nil
		})
		if err != nil {
			return nil, err
		}
		return v.(ratelimit.Store), nil
	}
	key := fmt.Sprintf("ratelimit-memory %s|%s|%s|%+v|%v|%v|%d", r.layerName(), r.Domain, ru.name, ru.entries, alg, limit, r.MaxKeys)
	v, err := b.part(key, func() (any, func() error, error) {
		m, err := ratelimit.NewMemory(alg, limit, ratelimit.MemoryConfig{MaxKeys: r.MaxKeys, Clock: b.opts.Clock})
		if err != nil {
			return nil, nil, err
		}
		return m, m.Close, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(ratelimit.Store), nil
}
