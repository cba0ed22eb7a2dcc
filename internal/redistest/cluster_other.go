//go:build !unix

package redistest

import (
	"errors"
	"os"
)

// The test cluster is started by scripts/test.sh, on Unix systems only.

func lockFile(*os.File) error   { return errors.New("the test cluster needs a Unix system") }
func unlockFile(*os.File) error { return nil }

func killProcess(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func processAlive(int) bool { return false }
