package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The variables scripts/test.sh sets for the Redis Cluster it starts.
const (
	// ClusterAddrsEnv holds the cluster's six nodes, comma-separated.
	ClusterAddrsEnv = "LOADSHED_REDIS_CLUSTER_ADDRS"
	// ClusterDirEnv holds its folder: <port>/redis.conf and <port>/redis.pid
	// for each node, so that a test can kill a node and start it again.
	ClusterDirEnv = "LOADSHED_REDIS_CLUSTER_DIR"
)

// Cluster is the Redis Cluster (3 masters, 3 replicas,
// cluster-node-timeout 1000) that scripts/test.sh starts. A test holds it
// alone from Use to its end (test binaries of several packages run at
// once, and one killing a master would disturb another's counts), and
// finds it as it was: every node up, cluster_state:ok, each master with a
// replica.
type Cluster struct {
	t     testing.TB
	Addrs []string
	dir   string
	lock  *os.File
}

// UseCluster returns the test cluster, held by this test until it ends,
// skipping (or, under scripts/test.sh, failing) the test when there is none.
func UseCluster(t testing.TB) *Cluster {
	t.Helper()
	addrs, dir := os.Getenv(ClusterAddrsEnv), os.Getenv(ClusterDirEnv)
	if addrs == "" || dir == "" {
		unavailable(t, ClusterAddrsEnv+" is not set; run ./scripts/test.sh, which starts a Redis Cluster")
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("redistest: cluster lock: %v", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		t.Fatalf("redistest: cluster lock: %v", err)
	}
	c := &Cluster{t: t, Addrs: strings.Split(addrs, ","), dir: dir, lock: f}
	t.Cleanup(func() {
		c.Restore()
		_ = unlockFile(f)
		f.Close()
	})
	c.Restore()
	return c
}

// Options returns cluster client options as a layer needs them
// (ContextTimeoutEnabled) and go-redis's defaults otherwise: in particular
// its 60s ClusterStateReloadInterval, which the layers must not rely on.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, DialTimeout: time.Second}
}

// Client returns a new cluster client (a host of its own), closed when the
// test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(c.Options())
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// node returns a plain client of one node.
func (c *Cluster) node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1,
		ReadTimeout: time.Second})
}

func (c *Cluster) do(addr string, args ...any) (any, error) {
	n := c.node(addr)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return n.Do(ctx, args...).Result()
}

// Slot returns the hash slot of a Redis key.
func (c *Cluster) Slot(key string) int {
	for _, a := range c.Addrs {
		if v, err := c.do(a, "cluster", "keyslot", key); err == nil {
			return int(v.(int64))
		}
	}
	c.t.Fatalf("redistest: no node answers CLUSTER KEYSLOT")
	return 0
}

// NodeInfo is one line of CLUSTER NODES.
type NodeInfo struct {
	ID, Addr string
	Master   bool
	Failed   bool
	Myself   bool   // the node that answered
	MasterID string // of a replica
	Slots    [][2]int
	// Migrating maps the slots this node is migrating away ([slot->-id])
	// to their target's id.
	Migrating map[int]string
}

// serves reports whether n is a live master serving slot.
func (n NodeInfo) serves(slot int) bool {
	if !n.Master || n.Failed {
		return false
	}
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// nodesOf returns CLUSTER NODES as the node at addr sees it.
func (c *Cluster) nodesOf(addr string) ([]NodeInfo, error) {
	v, err := c.do(addr, "cluster", "nodes")
	if err != nil {
		return nil, err
	}
	var out []NodeInfo
	for _, line := range strings.Split(strings.TrimSpace(v.(string)), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := NodeInfo{ID: f[0], Addr: strings.SplitN(f[1], "@", 2)[0], MasterID: f[3],
			Master: strings.Contains(f[2], "master"), Failed: strings.Contains(f[2], "fail"),
			Myself: strings.Contains(f[2], "myself")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				if slot, target, ok := strings.Cut(strings.Trim(r, "[]"), "->-"); ok {
					if n.Migrating == nil {
						n.Migrating = map[int]string{}
					}
					k, _ := strconv.Atoi(slot)
					n.Migrating[k] = target
				}
				continue // or importing: [slot-<-id]
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if hi != "" {
				b, _ = strconv.Atoi(hi)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// Nodes returns CLUSTER NODES as the first live node sees it.
func (c *Cluster) Nodes() []NodeInfo {
	for _, a := range c.Addrs {
		if ns, err := c.nodesOf(a); err == nil {
			return ns
		}
	}
	c.t.Fatalf("redistest: no node answers CLUSTER NODES")
	return nil
}

// MasterOf returns the master serving slot.
func (c *Cluster) MasterOf(slot int) NodeInfo {
	for _, n := range c.Nodes() {
		if n.serves(slot) {
			return n
		}
	}
	c.t.Fatalf("redistest: no master serves slot %d", slot)
	return NodeInfo{}
}

func (c *Cluster) port(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// Kill kills the node at addr (SIGKILL), as a crash would.
func (c *Cluster) Kill(addr string) {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, c.port(addr), "redis.pid"))
	if err != nil {
		c.t.Fatalf("redistest: pid of %s: %v", addr, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		c.t.Fatalf("redistest: bad pid file of %s", addr)
	}
	killProcess(pid)
	for deadline := time.Now().Add(5 * time.Second); processAlive(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s (pid %d) survives SIGKILL", addr, pid)
		}
	}
}

// alive reports whether the node at addr answers PING.
func (c *Cluster) alive(addr string) bool {
	v, err := c.do(addr, "ping")
	return err == nil && v == "PONG"
}

// start starts the node at addr again from its config; it rejoins the
// cluster from its nodes.conf (as a replica, if its slots moved).
func (c *Cluster) start(addr string) {
	conf := filepath.Join(c.dir, c.port(addr), "redis.conf")
	if out, err := exec.Command("redis-server", conf).CombinedOutput(); err != nil {
		c.t.Fatalf("redistest: restarting %s: %v: %s", addr, err, out)
	}
	for deadline := time.Now().Add(5 * time.Second); !c.alive(addr); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s does not answer after a restart", addr)
		}
	}
}

// StateOK reports whether every live node says cluster_state:ok.
func (c *Cluster) StateOK() bool {
	live := 0
	for _, a := range c.Addrs {
		v, err := c.do(a, "cluster", "info")
		if err != nil {
			continue
		}
		live++
		if !strings.Contains(v.(string), "cluster_state:ok") {
			return false
		}
	}
	return live > 0
}

// WaitOK waits until every live node says cluster_state:ok and returns
// when it first saw it.
func (c *Cluster) WaitOK(within time.Duration) time.Time {
	c.t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		if c.StateOK() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: no cluster_state:ok within %v", within)
		}
	}
}

// Restore brings the cluster back to its shape: every node started,
// cluster_state:ok, three masters with a replica each, no slot migrating.
// Roles may have swapped: a master killed earlier comes back as a replica.
func (c *Cluster) Restore() {
	c.t.Helper()
	for _, a := range c.Addrs {
		if !c.alive(a) {
			c.start(a)
		}
	}
	c.finishMigrations()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := c.healthy(); err == nil {
			return
		} else if time.Now().After(deadline) {
			c.t.Fatalf("redistest: the cluster did not come back: %v", err)
		}
	}
}

func (c *Cluster) healthy() error {
	if !c.StateOK() {
		return fmt.Errorf("cluster_state is not ok")
	}
	masters, replicas := 0, 0
	for _, n := range c.Nodes() {
		switch {
		case n.Failed:
			return fmt.Errorf("%s is marked failed", n.Addr)
		case n.Master && len(n.Slots) > 0:
			masters++
		case !n.Master:
			replicas++
		}
	}
	if masters != 3 || replicas != 3 {
		return fmt.Errorf("%d masters with slots and %d replicas", masters, replicas)
	}
	for _, a := range c.Addrs {
		v, err := c.do(a, "info", "replication")
		if err != nil {
			return err
		}
		s := v.(string)
		if strings.Contains(s, "role:slave") && !strings.Contains(s, "master_link_status:up") {
			return fmt.Errorf("replica %s is not in sync", a)
		}
	}
	for _, a := range c.Addrs {
		v, err := c.do(a, "cluster", "nodes")
		if err != nil {
			return err
		}
		if strings.Contains(v.(string), "->-") || strings.Contains(v.(string), "-<-") {
			return fmt.Errorf("%s has a slot migrating", a)
		}
	}
	return nil
}

// MigrateSlot moves slot from its master to another master the way
// redis-cli --cluster reshard does: SETSLOT IMPORTING on the target,
// MIGRATING on the source, MIGRATE of the slot's keys (in batches, as
// redis-cli's --cluster-pipeline), SETSLOT NODE on the target, the source
// and the other masters. It pauses before and after the MIGRATE, so that
// a load running meanwhile meets ASK and TRYAGAIN. It returns the target.
func (c *Cluster) MigrateSlot(slot int, pause time.Duration) NodeInfo {
	c.t.Helper()
	dst, finish := c.BeginMigration(slot)
	time.Sleep(pause)
	finish(pause)
	return dst
}

// BeginMigration marks slot MIGRATING on its master and IMPORTING on
// another, and returns the target and the function that moves the keys
// and hands the slot over (pausing between the two). Until then a
// multi-key command whose keys are partly in the source gets TRYAGAIN.
func (c *Cluster) BeginMigration(slot int) (NodeInfo, func(pause time.Duration)) {
	c.t.Helper()
	src := c.MasterOf(slot)
	var dst NodeInfo
	for _, n := range c.Nodes() {
		if n.Master && !n.Failed && n.ID != src.ID && len(n.Slots) > 0 {
			dst = n
			break
		}
	}
	c.must(dst.Addr, "cluster", "setslot", slot, "importing", src.ID)
	c.must(src.Addr, "cluster", "setslot", slot, "migrating", dst.ID)
	return dst, func(pause time.Duration) { c.finishMigration(slot, src, dst, pause) }
}

// must runs a command on one node, reporting an error as a test error (it
// runs on other goroutines than the test's too).
func (c *Cluster) must(addr string, args ...any) any {
	v, err := c.do(addr, args...)
	if err != nil {
		c.t.Errorf("redistest: %v on %s: %v", args, addr, err)
	}
	return v
}

// finishMigration moves slot's keys from src to dst and hands the slot
// over to dst on every master.
func (c *Cluster) finishMigration(slot int, src, dst NodeInfo, pause time.Duration) {
	host, port, _ := strings.Cut(dst.Addr, ":")
	for {
		ks, _ := c.must(src.Addr, "cluster", "getkeysinslot", slot, 10).([]any)
		if len(ks) == 0 {
			break
		}
		args := append([]any{"migrate", host, port, "", 0, 5000, "keys"}, ks...)
		if c.must(src.Addr, args...) == nil {
			return
		}
	}
	time.Sleep(pause)
	c.must(dst.Addr, "cluster", "setslot", slot, "node", dst.ID)
	c.must(src.Addr, "cluster", "setslot", slot, "node", dst.ID)
	for _, n := range c.Nodes() {
		if n.Master && !n.Failed && n.ID != src.ID && n.ID != dst.ID {
			c.must(n.Addr, "cluster", "setslot", slot, "node", dst.ID)
		}
	}
}

// finishMigrations completes the migrations a failed test left half done
// (a slot MIGRATING on its master), as redis-cli --cluster fix would.
func (c *Cluster) finishMigrations() {
	for _, a := range c.Addrs {
		ns, err := c.nodesOf(a)
		if err != nil {
			continue
		}
		for _, me := range ns {
			if !me.Myself {
				continue
			}
			for slot, target := range me.Migrating {
				for _, n := range ns {
					if n.ID == target {
						c.finishMigration(slot, me, n, 0)
					}
				}
			}
		}
	}
}

// KillMaster kills the master serving slot (SIGKILL) and returns at once,
// with a channel that receives the time a replica had taken its place and
// every live node said cluster_state:ok (the zero time if that took more
// than 15s, reported as a test error).
func (c *Cluster) KillMaster(slot int) <-chan time.Time {
	c.t.Helper()
	old := c.MasterOf(slot)
	c.Kill(old.Addr)
	ok := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(15 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m, found := c.servedBy(slot); found && m != old.Addr && c.StateOK() {
				ok <- time.Now()
				return
			}
		}
		c.t.Errorf("redistest: no replica took slot %d from %s within 15s", slot, old.Addr)
		ok <- time.Time{}
	}()
	return ok
}

// servedBy returns the live master serving slot as the first node that
// answers sees it.
func (c *Cluster) servedBy(slot int) (string, bool) {
	for _, a := range c.Addrs {
		ns, err := c.nodesOf(a)
		if err != nil {
			continue
		}
		for _, n := range ns {
			if n.serves(slot) {
				return n.Addr, true
			}
		}
		return "", false
	}
	return "", false
}
