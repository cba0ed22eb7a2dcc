// Package filewatch follows a configuration file for the processes that
// reload one: config's Live and the rate limit service. It sees editors
// that replace the file and Kubernetes' ConfigMap symlink swaps, takes a
// burst of writes as one change, and turns SIGHUP into a reload.
package filewatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Delay is how long Path waits after a change before it calls changed, so
// that an editor's several writes make one reload.
const Delay = 100 * time.Millisecond

// Path calls changed when path changes, Delay after the first
// change of a burst (through its directory when path is a file, so that
// editors that replace the file and Kubernetes' ConfigMap symlink swaps
// are seen; path itself when it is a directory), and hup on SIGHUP, until
// ctx ends. It also calls changed once, Delay after the watch is in
// place, because a change made between the caller's read of path and the
// start of the watch raises no event: changed must therefore skip content
// that is as it was. Watcher errors go to failed, and so does a panic of
// changed or hup, after which the watch goes on. It returns ctx's error,
// or why it could not watch.
func Path(ctx context.Context, path string, changed, hup func(), failed func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	defer w.Close()
	dir := path
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	defer signal.Stop(sig)
	timer := time.After(Delay)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sig:
			survive(path, hup, failed)
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			// The first change of a burst arms the timer; later ones ride
			// on it, so that a file written without pause still reloads.
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 && timer == nil {
				timer = time.After(Delay)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			failed(err)
		case <-timer:
			timer = nil
			survive(path, changed, failed)
		}
	}
}

// survive runs a reload, turning its panic into an error for failed: a
// reader that fails on a file must not end the watch, nor the process
// serving the rules it already has.
func survive(path string, reload func(), failed func(error)) {
	defer func() {
		if r := recover(); r != nil {
			failed(fmt.Errorf("reloading %s failed: %v", path, r))
		}
	}()
	reload()
}
