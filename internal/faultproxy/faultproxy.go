// Package faultproxy is a TCP proxy for tests that stands between a client
// and a server (here, go-redis and redis-server) and injects the faults a
// network and a server show in production: latency, a black hole (the
// connection stays open, nothing comes back), a cut in the middle of a
// reply, by FIN or by RST, after the request reached the server (the
// server acted, the client never learns how), and refused connections.
//
// It listens on a loopback port of its own and forwards to one target. It
// is for tests only: it reads whole chunks as they come, and a "reply" is
// whatever one read from the server returns, which for a Redis client
// sending one command at a time is one reply.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections to a target, with faults. Its methods are
// safe for concurrent use; faults apply to open connections at once.
type Proxy struct {
	target string
	addr   string

	latency   atomic.Int64 // ns added before each forwarded chunk
	blackHole atomic.Bool
	cutEvery  atomic.Int64 // cut the connection at every n-th reply; 0: never
	cutOnce   atomic.Bool  // cut the next reply only
	cutRST    atomic.Bool  // cut by RST instead of FIN
	replies   atomic.Int64
	cuts      atomic.Int64
	accepted  atomic.Int64

	mu      sync.Mutex
	ln      net.Listener // nil while refusing
	conns   map[net.Conn]struct{}
	closed  bool
	serving sync.WaitGroup
}

// New starts a proxy to target (host:port) on a free loopback port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's address, for the client.
func (p *Proxy) Addr() string { return p.addr }

// SetLatency delays every chunk forwarded, either way, by d.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// BlackHole makes the proxy swallow everything: connections open and stay
// open, requests go nowhere, nothing comes back.
func (p *Proxy) BlackHole() { p.blackHole.Store(true) }

// CutReplies makes the proxy cut the connection at every n-th reply (n ≥
// 1), after the server answered: half the reply reaches the client, then a
// FIN (or, with rst, an RST). The server has run the command; the client
// sees a broken reply. 0 stops cutting.
func (p *Proxy) CutReplies(n int, rst bool) {
	p.cutRST.Store(rst)
	p.cutEvery.Store(int64(n))
}

// CutOnce makes the proxy cut the next reply only, as CutReplies does. On a
// connection already open and idle, that is the reply to the next command:
// a client that re-sends it (on a new connection) gets its answer.
func (p *Proxy) CutOnce(rst bool) {
	p.cutRST.Store(rst)
	p.cutOnce.Store(true)
}

// Refuse closes the listener and cuts every open connection (RST), so that
// connecting fails at once with "connection refused", as with a server that
// is down. Heal listens again on the same address.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.CutAll(true)
}

// Heal ends every fault: no latency, no black hole, no cuts, and listening
// again if refusing. Connections that were black-holed are cut, as a
// partition's would be once it heals.
func (p *Proxy) Heal() error {
	black := p.blackHole.Swap(false)
	p.latency.Store(0)
	p.cutEvery.Store(0)
	p.cutOnce.Store(false)
	if black {
		p.CutAll(false)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return nil
	}
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.ln = ln
			p.serveLocked(ln)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// CutAll closes every open connection, by RST when rst is set.
func (p *Proxy) CutAll(rst bool) {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		closeConn(c, rst)
	}
}

// Accepted counts the connections accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Cuts counts the replies cut.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.CutAll(false)
	p.serving.Wait()
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln = ln
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.serving.Add(1)
	go func() {
		defer p.serving.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			go p.handle(c)
		}
	}()
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) handle(client net.Conn) {
	if !p.track(client, true) {
		client.Close()
		return
	}
	defer p.track(client, false)
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		closeConn(client, true)
		return
	}
	if !p.track(server, true) {
		server.Close()
		client.Close()
		return
	}
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	go func() { p.pipe(client, server, false); done <- struct{}{} }()
	go func() { p.pipe(server, client, true); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst chunk by chunk, applying the faults; replies is
// set for the server-to-client direction.
func (p *Proxy) pipe(src, dst net.Conn, replies bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.latency.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if p.blackHole.Load() {
				continue // swallowed
			}
			if replies {
				every := p.cutEvery.Load()
				if p.cutOnce.CompareAndSwap(true, false) || (every > 0 && p.replies.Add(1)%every == 0) {
					p.cuts.Add(1)
					_, _ = dst.Write(buf[:n/2])
					closeConn(dst, p.cutRST.Load())
					src.Close()
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// closeConn closes c with a FIN, or with an RST (linger 0) when rst is set.
func closeConn(c net.Conn, rst bool) {
	if tc, ok := c.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
