package config

// The HTTP side: the one file to change when the middleware's API does.

import (
	"context"
	"net/http"

	"github.com/loadshed/loadshed/shed"
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
	// Checked here, so that a bad section fails the build, not the first
	// request.
	if _, err := middleware(nil, cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// middleware builds the HTTP middleware for chain (a throwaway chain when
// nil, to check cfg).
func middleware(chain *shed.Chain, cfg shedhttp.Config) (func(http.Handler) http.Handler, error) {
	if chain == nil {
		c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{nopLayer{}}})
		if err != nil {
			return nil, err
		}
		chain = c
	}
	return shedhttp.New(chain, cfg)
}

type nopLayer struct{}

func (nopLayer) Name() string { return "nop" }
func (nopLayer) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	return shed.Lease{}, nil
}

// Middleware returns net/http middleware that runs every request through
// b's chain, configured by the file's http section over Options.HTTP.
func (b *Built) Middleware() (func(http.Handler) http.Handler, error) {
	return middleware(b.Chain, b.HTTP)
}
