package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of a test's own, on a free loopback port, that
// the test may kill and restart (same port, empty data: no persistence),
// as an outage or a restart would. Tests that do not kill Redis use the
// shared server (Addr) instead.
type Server struct {
	t    testing.TB
	port int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// StartServer starts a redis-server when one is on PATH, skipping (or,
// under LOADSHED_REQUIRE_REDIS=1, failing) the test when there is none. It
// is killed when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "redis-server is not on PATH")
	}
	s := &Server{t: t, dir: t.TempDir()}
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if err = s.start(); err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("redistest: starting redis-server: %v", err)
		}
	}
	t.Cleanup(s.Kill)
	return s
}

// Addr is the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Kill kills the server (SIGKILL): connections drop, new ones are refused.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same port, empty, and returns
// once it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for i := 0; i < 20; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // the port may linger a moment
	}
	s.t.Fatalf("redistest: restarting redis-server: %v", err)
}

func (s *Server) start() error {
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", "")
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %w", s.port, err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d does not answer: %w", s.port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
