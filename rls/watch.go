package rls

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/internal/filewatch"
)

// ReloadFrom reads path as Load does and gives its rules to Reload. A file
// with an error is refused, the running rules keep serving, and the error
// is returned (config.Errors with positions where the file has them).
func (s *Server) ReloadFrom(path string) error { return s.reloadFrom(path, true) }

// reloadFrom is ReloadFrom; unless always, rules equal to the running ones
// are left as they are, neither reloaded nor counted.
func (s *Server) reloadFrom(path string, always bool) error {
	ds, err := LoadLimited(path, s.cfg.Limits)
	if err == nil && !always && s.running(ds) {
		return nil
	}
	if err == nil {
		err = s.Reload(ds)
	}
	s.last.set(time.Now(), err)
	if err != nil {
		s.refused.Add(1)
		s.cfg.Logger.Error("rls: configuration refused; the running rules keep serving", "path", path, "err", config.ErrorText(err))
		return err
	}
	s.applied.Add(1)
	return nil
}

// LastReload returns when ReloadFrom or Watch last read the rules, and why
// that read was refused (nil when it was applied); a zero time when none
// has yet. A status page shows it; the running rules are those of the
// last applied reload, or New's.
func (s *Server) LastReload() (at time.Time, err error) { return s.last.get() }

// lastReload is a reload's time and outcome, read by other goroutines.
type lastReload struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

func (l *lastReload) set(at time.Time, err error) {
	l.mu.Lock()
	l.at, l.err = at, err
	l.mu.Unlock()
}

func (l *lastReload) get() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at, l.err
}

func (s *Server) running(ds []Domain) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return reflect.DeepEqual(ds, s.rules)
}

// ReloadStats reports how many reloads were applied and refused.
func (s *Server) ReloadStats() (applied, refused int64) { return s.applied.Load(), s.refused.Load() }

// Watch reloads the rules from path (a file, or a directory of
// envoyproxy/ratelimit files) when it changes, and on SIGHUP, until ctx
// ends, as config's Live.Watch follows its file. A change that leaves the
// rules as they are reloads nothing, so that the read Watch makes when it
// starts costs nothing when the file did not change since New; SIGHUP
// always reloads.
// It returns ctx's error, or why it could not watch.
func (s *Server) Watch(ctx context.Context, path string) error {
	return filewatch.Path(ctx, path, func() { s.reloadFrom(path, false) }, func() { s.ReloadFrom(path) }, func(err error) {
		s.cfg.Logger.Error("rls: watching", "path", path, "err", err)
	})
}
