// Package redistest connects tests to the real redis-server that
// scripts/test.sh starts, and keeps each test's keys apart so that no test
// needs to flush the database.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// AddrEnv names the variable holding the test server's address (host:port).
const AddrEnv = "LOADSHED_REDIS_ADDR"

// RequireEnv, when set to 1, makes a missing or unreachable server fail the
// test instead of skipping it. scripts/test.sh sets it.
const RequireEnv = "LOADSHED_REQUIRE_REDIS"

// Addr returns the test server's address, skipping (or, when required,
// failing) the test when there is none.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(AddrEnv)
	if addr == "" {
		unavailable(t, AddrEnv+" is not set; run ./scripts/test.sh, which starts redis-server")
	}
	return addr
}

// Options returns client options for the test server.
func Options(t testing.TB) *redis.Options {
	return &redis.Options{Addr: Addr(t), DialTimeout: 2 * time.Second}
}

// Client returns a client of the test server, closed when the test ends.
// Each call is a separate client with its own connection pool, as a separate
// host would have.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(Options(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unavailable(t, "redis at "+os.Getenv(AddrEnv)+" does not answer: "+err.Error())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test run, so tests sharing one
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	return "lstest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}
