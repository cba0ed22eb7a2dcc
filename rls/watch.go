package rls

import (
	"context"

	"github.com/loadshed/loadshed/config"
)

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
// ends (config.WatchPath). It returns ctx's error, or why it could not
// watch.
func (s *Server) Watch(ctx context.Context, path string) error {
	reload := func() { s.ReloadFrom(path) }
	return config.WatchPath(ctx, path, reload, reload, func(err error) {
		s.cfg.Logger.Error("rls: watching", "path", path, "err", err)
	})
}
