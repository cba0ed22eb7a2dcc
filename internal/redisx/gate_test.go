package redisx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestGateProbesOncePerInterval(t *testing.T) {
	g := NewGate(100)
	if !g.Try(0) || g.Down() {
		t.Fatal("a new gate must let requests through")
	}
	if !g.Failed(10) {
		t.Fatal("the first failure must begin a fallback")
	}
	if g.Failed(20) {
		t.Fatal("a second failure must not begin another fallback")
	}
	if g.Try(50) || g.Try(119) {
		t.Fatal("no request may use Redis within the interval")
	}
	if !g.Try(120) {
		t.Fatal("the first request after the interval must probe")
	}
	if g.Try(121) || g.Try(150) {
		t.Fatal("only one request may probe")
	}
	g.Answered()
	if !g.Try(151) || g.Down() {
		t.Fatal("an answer must end the fallback")
	}
	if g.Outages() != 1 {
		t.Fatalf("Outages() = %d, want 1", g.Outages())
	}
}

func TestGateFailedProbeStartsAnotherInterval(t *testing.T) {
	g := NewGate(100)
	g.Failed(0)
	if !g.Try(100) {
		t.Fatal("want a probe at the end of the interval")
	}
	g.Failed(130) // the probe timed out
	if g.Try(229) {
		t.Fatal("a failed probe must leave Redis alone for a whole interval")
	}
	if !g.Try(230) {
		t.Fatal("want the next probe one interval after the failed one")
	}
}

// Many requests racing at the end of an interval: exactly one probes.
func TestGateOneProbeUnderRace(t *testing.T) {
	g := NewGate(int64ToDuration(1000))
	g.Failed(0)
	var probes atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.Try(1000) {
				probes.Add(1)
			}
		}()
	}
	wg.Wait()
	if probes.Load() != 1 {
		t.Fatalf("%d probes, want 1", probes.Load())
	}
}

func int64ToDuration(n int64) time.Duration { return time.Duration(n) }

func TestIsOutage(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, true},
		{fmt.Errorf("wrapped: %w", redis.ErrClosed), true},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisError("ERR Error running script"), false},
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{redisError("READONLY You can't write against a read only replica."), true},
		{redisError("CLUSTERDOWN The cluster is down"), true},
		{fmt.Errorf("ctx: %w", redisError("BUSY Redis is busy running a script")), true},
		// A slot moving is no outage (1,310 TRYAGAIN replies once
		// sent every key on the client to the fallback).
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{redisError("MOVED 3999 127.0.0.1:6381"), false},
		{redisError("ASK 3999 127.0.0.1:6381"), false},
	} {
		if got := IsOutage(tc.err); got != tc.want {
			t.Errorf("IsOutage(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The replies that say a command did not run are retried within the
// budget; others, and a budget spent, are not.
func TestAgain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, false},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisError("MOVED 3999 127.0.0.1:6381"), true},
		{redisError("ASK 3999 127.0.0.1:6381"), true},
		{redisError("CLUSTERDOWN The cluster is down"), true},
		{fmt.Errorf("w: %w", redisError("LOADING Redis is loading the dataset in memory")), true},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if got := Again(ctx, tc.err, 0); got != tc.want {
			t.Errorf("Again(%v) = %v, want %v", tc.err, got, tc.want)
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), MaxRetryBackoff)
	defer cancel()
	if Again(ctx, redisError("TRYAGAIN x"), 10) {
		t.Error("retried with no budget left for the backoff and a round trip")
	}
}

// A retry cut short by the budget's end after a reply saying the command
// did not run reports that reply, which is no outage; an error of the
// first try, a dead connection and an answer are reported as they are.
func TestRetry(t *testing.T) {
	tryAgain := redisError("TRYAGAIN Multiple keys request during rehashing of slot")
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: context.DeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	atDeadline := func(ctx context.Context, err error) error { <-ctx.Done(); return err }
	for _, tc := range []struct {
		name   string
		tries  func(ctx context.Context, try int) error
		want   error
		outage bool
	}{
		{"slow retry after TRYAGAIN", func(ctx context.Context, try int) error {
			if try == 0 {
				return tryAgain
			}
			return atDeadline(ctx, timeout)
		}, tryAgain, false},
		{"context error after TRYAGAIN", func(ctx context.Context, try int) error {
			if try == 0 {
				return tryAgain
			}
			<-ctx.Done()
			return ctx.Err()
		}, tryAgain, false},
		{"slow first try", func(ctx context.Context, try int) error { return atDeadline(ctx, timeout) }, timeout, true},
		{"node gone after TRYAGAIN", func(ctx context.Context, try int) error {
			if try == 0 {
				return tryAgain
			}
			return refused
		}, refused, true},
		{"answered after TRYAGAIN", func(ctx context.Context, try int) error {
			if try < 2 {
				return tryAgain
			}
			return nil
		}, nil, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		try := 0
		err := Retry(ctx, func() error { err := tc.tries(ctx, try); try++; return err })
		cancel()
		if !errors.Is(err, tc.want) || IsOutage(err) != tc.outage {
			t.Errorf("%s: Retry = %v (outage %v), want %v (outage %v)", tc.name, err, IsOutage(err), tc.want, tc.outage)
		}
	}
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestCheckClient(t *testing.T) {
	var typedNil *redis.Client
	var typedNilCluster *redis.ClusterClient
	on := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	off := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	clusterOff := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ringOn := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer on.Close()
	defer off.Close()
	defer clusterOff.Close()
	defer ringOn.Close()
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		want error
	}{
		{"nil", nil, ErrNilClient},
		{"typed nil client", typedNil, ErrNilClient},
		{"typed nil cluster", typedNilCluster, ErrNilClient},
		{"context timeouts on", on, nil},
		{"context timeouts off", off, ErrNoContextTimeout},
		{"cluster off", clusterOff, ErrNoContextTimeout},
		{"ring on", ringOn, nil},
	} {
		if got := CheckClient(tc.c); !errors.Is(got, tc.want) {
			t.Errorf("%s: CheckClient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
