package shedclient_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/loadshed/loadshed/shedclient"
)

// staticRT answers every request with the same response, without a
// network, so that the benchmarks measure the client's own work.
type staticRT struct {
	status int
	header http.Header
}

func (s *staticRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: s.status, Header: s.header, Body: http.NoBody}, nil
}

func benchTransport(b *testing.B, cfg shedclient.Config, header http.Header, scopes int) {
	rt := shedclient.New(cfg).Transport(&staticRT{status: http.StatusOK, header: header})
	reqs := make([]*http.Request, scopes)
	for i := range reqs {
		reqs[i], _ = http.NewRequestWithContext(context.Background(), "GET", "http://svc.test/p"+strconv.Itoa(i), nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := rt.RoundTrip(reqs[i%len(reqs)])
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
}

// BenchmarkTransport is the client's cost per request: an answer with no
// fields, one with RateLimit fields (a quota not spent), and the same
// over a thousand scopes of a host.
func BenchmarkTransport(b *testing.B) {
	fields := http.Header{
		"Ratelimit-Policy": {`"default";q=100;w=60`},
		"Ratelimit":        {`"default";r=50;t=30`},
	}
	byPath := func(r *http.Request) string { return r.URL.Path }
	b.Run("plain", func(b *testing.B) { benchTransport(b, shedclient.Config{}, http.Header{}, 1) })
	b.Run("fields", func(b *testing.B) { benchTransport(b, shedclient.Config{}, fields, 1) })
	b.Run("fields-1000-scopes", func(b *testing.B) {
		benchTransport(b, shedclient.Config{HTTPScope: byPath}, fields, 1000)
	})
}
