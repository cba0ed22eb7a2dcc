//go:build unix

package config

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

func TestWatchFollowsTheFileAndSIGHUP(t *testing.T) {
	// Keep SIGHUP from ending the test process before Watch listens.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	l, path := open(t, fmt.Sprintf(twoRules, 100), Options{})
	defer watch(l)()
	waitFor := func(what string, applied int64, poke func()) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if a, _ := l.Stats(); a >= applied {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no reload within 10s", what)
			}
			poke()
			time.Sleep(50 * time.Millisecond)
		}
	}
	n := 0
	waitFor("a write", 1, func() {
		n++
		writeFile(t, path, fmt.Sprintf(twoRules, 100+n))
	})
	// An editor's way: write a new file, rename it over the old one.
	waitFor("a rename", 2, func() {
		n++
		tmp := path + ".tmp"
		writeFile(t, tmp, fmt.Sprintf(twoRules, 100+n))
		os.Rename(tmp, path)
	})
	a, _ := l.Stats()
	waitFor("SIGHUP", a+1, func() { syscall.Kill(os.Getpid(), syscall.SIGHUP) })
}

func TestWatchReadsAChangeMadeBeforeItBegan(t *testing.T) {
	l, path := open(t, fmt.Sprintf(twoRules, 100), Options{})
	// Written after Open read the file and before the watch is in place:
	// no event will tell of it.
	writeFile(t, path, fmt.Sprintf(twoRules, 101))
	defer watch(l)()
	deadline := time.Now().Add(10 * time.Second)
	for a, _ := l.Stats(); a != 1; a, _ = l.Stats() {
		if time.Now().After(deadline) {
			t.Fatal("the change made before Watch began was never read")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watch runs l.Watch until the function it returns is called, which
// waits for Watch to end.
func watch(l *Live) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Watch(ctx) }()
	return func() {
		cancel()
		<-done
	}
}
