package faultproxy_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/faultproxy"
	"github.com/loadshed/loadshed/internal/redistest"
)

func client(t *testing.T, p *faultproxy.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func ping(c *redis.Client, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := c.Ping(ctx).Err()
	return time.Since(start), err
}

// Each fault shows as the client would meet it in production.
func TestFaults(t *testing.T) {
	redistest.Client(t)
	p, err := faultproxy.New(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(t, p)
	if _, err := ping(c, time.Second); err != nil {
		t.Fatalf("pass-through: %v", err)
	}

	p.SetLatency(30 * time.Millisecond)
	if d, err := ping(c, time.Second); err != nil || d < 50*time.Millisecond {
		t.Fatalf("latency: %v after %v, want at least 2 × 30ms", err, d)
	}
	p.Heal()

	p.BlackHole()
	if d, err := ping(c, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("black hole: %v after %v, want a timeout", err, d)
	}
	p.Heal()
	if _, err := ping(c, time.Second); err != nil {
		// The black-holed connection was cut on healing; the pool may hand
		// it out once more.
		if _, err := ping(c, time.Second); err != nil {
			t.Fatalf("healed: %v", err)
		}
	}

	p.CutReplies(1, false)
	if _, err := ping(c, time.Second); err == nil {
		t.Fatal("FIN mid-reply: the reply arrived whole")
	}
	p.CutReplies(1, true)
	if _, err := ping(c, time.Second); err == nil {
		t.Fatal("RST mid-reply: the reply arrived whole")
	}
	if p.Cuts() != 2 {
		t.Fatalf("%d cuts, want 2", p.Cuts())
	}
	p.Heal()

	p.Refuse()
	if _, err := ping(c, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("refused: %v, want ECONNREFUSED", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := ping(c, time.Second); err != nil {
		t.Fatalf("after refusing: %v", err)
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// A test's own server can be killed and restarted on the same port.
func TestServerKillRestart(t *testing.T) {
	s := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart()
	var err error
	for i := 0; i < 3; i++ { // the pool's dead connections go first
		if err = c.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("restarted: %v", err)
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("a restarted server kept its data")
	}
}
