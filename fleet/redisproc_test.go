package fleet

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisProc is a redis-server of the test's own, on a free loopback port,
// that the test may kill and start again on the same port (without
// persistence: a restarted server is empty, as after a crash).
type redisProc struct {
	t    *testing.T
	bin  string
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startRedisProc(t *testing.T) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &redisProc{t: t, bin: bin, addr: addr, dir: t.TempDir()}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *redisProc) start() {
	p.t.Helper()
	port := p.addr[strings.LastIndexByte(p.addr, ':')+1:]
	cmd := exec.Command(p.bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--loglevel", "notice", "--dir", p.dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = cmd
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				up <- true
				io.Copy(io.Discard, out)
				return
			}
		}
		up <- false
	}()
	select {
	case ok := <-up:
		if !ok {
			p.t.Fatal("redis-server exited before it was ready (port taken?)")
		}
	case <-time.After(10 * time.Second):
		p.t.Fatal("redis-server did not start within 10s")
	}
}

// kill stops the server at once (SIGKILL), as a crash would.
func (p *redisProc) kill() {
	if p.cmd != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		p.cmd = nil
	}
}

// answers reports whether a fresh client gets a PONG.
func (p *redisProc) answers() bool {
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}
