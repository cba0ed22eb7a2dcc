package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

// The connections opened before a flood are the ones its requests use:
// the server accepts no new one for them, and one left waiting past
// warmFor is replaced rather than used.
func TestRequestsUseTheConnectionsOpenedFirst(t *testing.T) {
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newLoadClient([]string{srv.URL}, 0, time.Second, 8)
	defer c.close()
	if err := c.openConns(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	waitFor(t, func() bool { return accepted.Load() == 3 }, "the server to accept the 3 connections opened")
	if s := c.do(context.Background(), shed.Default, 0); s.res != resOK {
		t.Fatalf("request: result %d, want ok", s.res)
	}
	if n, left := accepted.Load(), len(c.warm[addr]); n != 3 || left != 2 {
		t.Errorf("after one request: %d connections accepted (want 3: none new), %d left unused (want 2)", n, left)
	}

	// Stale: the two left are closed, not used, when the transport next
	// needs a connection (the one the first request left idle is closed
	// here, so the next request needs one), and a new one is dialled.
	for range 2 {
		w := <-c.warm[addr]
		w.at = time.Now().Add(-warmFor)
		c.warm[addr] <- w
	}
	c.client.CloseIdleConnections()
	if s := c.do(context.Background(), shed.Default, 0); s.res != resOK {
		t.Fatalf("request: result %d, want ok", s.res)
	}
	waitFor(t, func() bool { return accepted.Load() == 4 }, "the server to accept a new connection for the stale ones")
	if left := len(c.warm[addr]); left != 0 {
		t.Errorf("%d stale connections left, want 0 (each taken and closed)", left)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
