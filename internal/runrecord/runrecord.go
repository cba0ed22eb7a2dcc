// Package runrecord holds what the demonstrations that measure write
// beside their figures in docs/results: the commit measured, the load
// average, and the file itself, replaced whole.
package runrecord

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// LoadAverage is /proc/loadavg's three figures; "" when unreadable.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Commit is the revision of the tree the run is in (git rev-parse HEAD, or
// with describe git describe --always --abbrev=12), with "+modified" when
// files other than the results (under resultsDir) have changes not
// committed; the revision this binary was built from when git cannot tell
// (run outside the repository); "unknown" without either.
func Commit(resultsDir string, describe bool) string {
	rev := []string{"rev-parse", "HEAD"}
	if describe {
		rev = []string{"describe", "--always", "--abbrev=12"}
	}
	if out, err := exec.Command("git", rev...).Output(); err == nil {
		rev := strings.TrimSpace(string(out))
		args := []string{"status", "--porcelain", "--untracked-files=no", "--", "."}
		if resultsDir != "" {
			args = append(args, ":(exclude)"+filepath.ToSlash(resultsDir))
		}
		if st, err := exec.Command("git", args...).Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			rev += "+modified"
		}
		return rev
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, modified := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			if modified {
				rev += "+modified"
			}
			return rev
		}
	}
	return "unknown"
}

// WriteFile replaces path with b (mode 0644), so that a run stopped
// half-way leaves the last complete file.
func WriteFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
