package concurrency

import (
	_ "embed"

	"github.com/loadshed/loadshed/internal/redisx"
)

// The scripts of the Redis limiter, each safe to run twice for one call
// (go-redis retries a command whose reply was lost): see the .lua files.
var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/renew.lua
	renewLua string

	acquireScript = redisx.NewScript(acquireLua)
	releaseScript = redisx.NewScript(releaseLua)
	renewScript   = redisx.NewScript(renewLua)
)
