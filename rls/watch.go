package rls

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

// WatchDelay is how long Watch waits after a change before reading, so
// that a file written in several steps is read once, whole.
const WatchDelay = 100 * time.Millisecond

// ReloadFrom reads path as Load does and gives its rules to Reload. A file
// with an error is refused, the running rules keep serving, and the error
// is returned (config.Errors with positions where the file has them).
func (s *Server) ReloadFrom(path string) error {
	ds, err := Load(path)
	if err == nil {
		err = s.Reload(ds)
	}
	if err != nil {
		s.refused.Add(1)
		s.cfg.Logger.Error("rls: configuration refused; the running rules keep serving", "path", path, "err", err)
		return err
	}
	s.applied.Add(1)
	return nil
}

// ReloadStats reports how many reloads were applied and refused.
func (s *Server) ReloadStats() (applied, refused int64) { return s.applied.Load(), s.refused.Load() }

// Watch reloads the rules from path (a file, or a directory of
// envoyproxy/ratelimit files) when it changes, and on SIGHUP, until ctx
// ends. It returns ctx's error, or why it could not watch.
func (s *Server) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rls: watching %s: %w", path, err)
	}
	defer w.Close()
	dir := path
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		dir = filepath.Dir(path) // editors and ConfigMaps replace files
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("rls: watching %s: %w", path, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hup:
			s.ReloadFrom(path)
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("rls: the file watcher stopped")
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 && timer == nil {
				timer = time.After(WatchDelay)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("rls: the file watcher stopped")
			}
			s.cfg.Logger.Error("rls: watching", "path", path, "err", err)
		case <-timer:
			timer = nil
			s.ReloadFrom(path)
		}
	}
}
