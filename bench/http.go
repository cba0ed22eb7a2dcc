package bench

import (
	"io"
	"net/http"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// OKHandler is the bare handler every HTTP row wraps: it writes a status
// and two bytes, so that what differs between rows is the middleware.
func OKHandler(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "ok")
}

// DiscardWriter is a ResponseWriter that keeps nothing and reuses its
// header map, so that a row using it shows the middleware's own
// allocations, not the recorder's.
type DiscardWriter struct {
	h      http.Header
	status int
}

// NewDiscardWriter returns a writer with an empty header map.
func NewDiscardWriter() *DiscardWriter { return &DiscardWriter{h: http.Header{}} }

// Header returns the reused map, emptied: each request starts clean.
func (d *DiscardWriter) Header() http.Header {
	clear(d.h)
	return d.h
}

// WriteHeader records the status (see Status).
func (d *DiscardWriter) WriteHeader(code int) { d.status = code }

// Write discards b.
func (d *DiscardWriter) Write(b []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(b), nil
}

// WriteString is what net/http's own writer offers: io.WriteString then
// needs no copy.
func (d *DiscardWriter) WriteString(s string) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(s), nil
}

// Status returns the status written since the last Reset (0 for none).
func (d *DiscardWriter) Status() int { return d.status }

// Reset forgets the status, for the next request.
func (d *DiscardWriter) Reset() { d.status = 0 }

// ShedStack says which of loadshed's layers a middleware built by
// NewShedHandler holds, in the chain's order.
type ShedStack struct {
	// RateLimit, when not nil, is a per-key rate limit (rule "per-key",
	// ratelimit.ByClient) over an in-memory token bucket.
	RateLimit *ratelimit.Limit
	// Concurrency, when not nil, is a local in-flight limiter.
	Concurrency *concurrency.Config
}

// NewShedHandler returns next behind loadshed's HTTP middleware with the
// layers of s, keyed by client IP (the middleware's default), and a
// function that stops the layers' background work.
func NewShedHandler(s ShedStack, next http.Handler) (http.Handler, func(), error) {
	var layers []shed.Layer
	var closers []func()
	stop := func() {
		for _, c := range closers {
			c()
		}
	}
	if s.RateLimit != nil {
		m, err := ratelimit.NewMemory(ratelimit.TokenBucket, *s.RateLimit, ratelimit.MemoryConfig{})
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() { _ = m.Close() })
		l, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
			{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: m},
		}})
		if err != nil {
			stop()
			return nil, nil, err
		}
		closers = append(closers, func() { _ = l.Close() })
		layers = append(layers, l)
	}
	if s.Concurrency != nil {
		l, err := concurrency.New(*s.Concurrency)
		if err != nil {
			stop()
			return nil, nil, err
		}
		layers = append(layers, l)
	}
	c, err := shed.NewChain(shed.Config{Layers: layers})
	if err != nil {
		stop()
		return nil, nil, err
	}
	mw, err := shedhttp.New(c, shedhttp.Config{})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return mw(next), stop, nil
}
