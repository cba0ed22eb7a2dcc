package ratelimit

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/shed/shedtest"
)

// startRedis runs a redis-server of the test's own on a free loopback port,
// in a temporary folder, stopped when the test ends, and returns its
// address. args come first (a config file, say); ready is the log line that
// says it serves.
func startRedis(t *testing.T, ready string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	addr := closedAddr(t)
	port := strings.TrimPrefix(addr, "127.0.0.1:")
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--loglevel", "notice", "--dir", t.TempDir())
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
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
			t.Fatal("redis-server exited before it was ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("redis-server did not start within 10s")
	}
	return addr
}

const redisReady = "Ready to accept connections"

// runContractOn runs every contract step table on a store built on client.
func runContractOn(t *testing.T, client redis.UniversalClient) {
	st := contractStore{name: "topology", open: func(t *testing.T, alg Algorithm, limit Limit, start time.Time) (Store, func(time.Time)) {
		clk := shedtest.NewClock(start)
		return fixedRedis(t, client, clk, alg, limit, RedisConfig{OverLimitKeys: -1}), clk.Set
	}}
	for _, c := range contractCases {
		for _, alg := range c.algs {
			t.Run(c.name+"/"+alg.String(), func(t *testing.T) { runSteps(t, st, alg, c.limit, c.steps) })
		}
	}
}

// A one-node Redis Cluster owning every slot: the cluster client routes each
// script by its key's hash tag, and the step tables give the same figures.
func TestRedisCluster(t *testing.T) {
	addr := startRedis(t, redisReady, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Do(bg, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	for { // the node turns its state to ok on its next cluster tick
		info, err := admin.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatalf("cluster did not come up: %v", err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("cluster state never became ok")
		case <-time.After(20 * time.Millisecond):
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})
	defer c.Close()
	runContractOn(t, c)
}

// Sentinel: a failover client asks a sentinel for the master, then runs the
// scripts there.
func TestRedisSentinel(t *testing.T) {
	master := startRedis(t, redisReady)
	host, port, _ := strings.Cut(master, ":")
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte("sentinel monitor lsmaster "+host+" "+port+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := startRedis(t, "+monitor master", conf, "--sentinel")
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "lsmaster", SentinelAddrs: []string{sentinel},
		ContextTimeoutEnabled: true})
	defer c.Close()
	runContractOn(t, c)
}
