package redisx

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/loadshed/loadshed/internal/redistest"
)

// On a Cluster client the gate keeps a gate per master: a node's outage
// sends only its slots' keys to the fallback, one probe per interval goes
// to it, an answer ends it, and a node no request leads to any more (a dead
// master whose replica took its slots) is forgotten after two intervals.
func TestGatePerClusterNode(t *testing.T) {
	cl := redistest.UseCluster(t)
	c := cl.Client()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// Two keys on different masters.
	a := "k0"
	b := ""
	for i := 1; b == ""; i++ {
		if k := "k" + strconv.Itoa(i); cl.MasterOf(cl.Slot(k)).Addr != cl.MasterOf(cl.Slot(a)).Addr {
			b = k
		}
	}
	const iv = int64(time.Second)
	g := NewClientGate(c, time.Second)
	if !g.TryKey(0, a) || !g.TryKey(0, b) || g.Down() {
		t.Fatal("a new gate is closed")
	}
	if !g.FailedKey(10, a) || g.FailedKey(20, a) {
		t.Fatal("Failed reports a new outage once")
	}
	if !g.Down() || g.Outages() != 1 {
		t.Fatalf("Down %v, Outages %d", g.Down(), g.Outages())
	}
	if g.TryKey(30, a) {
		t.Fatal("a key of the failed node went to Redis within the interval")
	}
	if !g.TryKey(30, b) {
		t.Fatal("a key of another node fell back: the outage is the node's, not the client's")
	}
	if !g.TryKey(20+iv, a) || g.TryKey(21+iv, a) {
		t.Fatal("not exactly one probe after the interval")
	}
	g.AnsweredKey(22+iv, a)
	if g.Down() || !g.TryKey(23+iv, a) {
		t.Fatal("an answer did not end the node's outage")
	}
	// A node nobody probes any more is forgotten two intervals on.
	g.FailedKey(100, a)
	g.AnsweredKey(101, b)
	if !g.Down() {
		t.Fatal("an answer from another node ended this node's outage")
	}
	g.AnsweredKey(100+3*iv, b)
	if g.Down() {
		t.Fatal("a node left unprobed for two intervals still counts as down")
	}
}
