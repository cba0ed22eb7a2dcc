package config

// The HTTP side: the one file to change when the middleware's API does.

import (
	"github.com/loadshed/loadshed/shedhttp"
)

// httpConfig applies the file's http section to base.
func httpConfig(h *HTTP, base shedhttp.Config) (shedhttp.Config, error) {
	cfg := base
	switch h.Key.From {
	case Header:
		cfg.Key = shedhttp.KeyHeader(h.Key.Header)
	case Bearer:
		cfg.Key = shedhttp.KeyBearer()
	}
	if h.Key.Hash && cfg.Key != nil {
		cfg.Key = shedhttp.KeyHash(cfg.Key)
	}
	cfg.ClientIP = shedhttp.ClientIPConfig{TrustedProxies: h.TrustedProxies, Header: h.ClientIPHeader}
	cfg.OnKeyError = h.OnKeyError
	cfg.MaxKeyLength = h.MaxKeyLength
	cfg.DefaultPriority = h.DefaultPriority
	cfg.LegacyHeaders = h.LegacyHeaders
	if len(h.Priorities) > 0 {
		cfg.Priorities = make(shedhttp.RoutePriorities, len(h.Priorities))
		for k, p := range h.Priorities {
			cfg.Priorities[k] = p
		}
	}
	return cfg, nil
}

// Middleware returns net/http middleware that runs every request through
// b's chain, configured by the file's http section over Options.HTTP (the
// configuration in HTTP when b was built: Build checks it, so that a bad
// section fails the build, not the first request). Its Close does
// nothing: close b.
func (b *Built) Middleware() shedhttp.Middleware { return b.mw }
