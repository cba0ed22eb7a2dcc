package api

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"
)

// cpuProfile writes a CPU profile of this process to path from now until
// stop is called or, when d > 0, for d, whichever ends first. The length
// is there for the overload demonstration, which kills its servers at the
// end of each step (nothing they hold is worth a graceful shutdown) and
// would lose a profile that waited for the server to stop.
func cpuProfile(path string, d time.Duration) (stop func() error, err error) {
	if d < 0 {
		return nil, fmt.Errorf("server: -cpuprofile-for must not be negative, got %s", d)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("server: -cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("server: -cpuprofile: %w", err)
	}
	var once sync.Once
	var closeErr error
	stop = func() error {
		once.Do(func() {
			pprof.StopCPUProfile()
			closeErr = f.Close()
		})
		return closeErr
	}
	if d > 0 {
		time.AfterFunc(d, func() { _ = stop() })
	}
	return stop, nil
}
