// Command server runs the example payments API behind loadshed's default
// set-up (or, for comparison, behind nothing, one priority-blind rate limit,
// or the set-up tuned for one CPU). It is the server examples/overload
// floods.
//
//	go run ./examples/server                       # 127.0.0.1:8080, in memory
//	go run ./examples/server -redis 127.0.0.1:6379 -instance a
//	go run ./examples/server -protect none         # no protection at all
//	go run ./examples/server -downstream-pool 4    # every request waits on one of 4 downstream connections (30ms)
//
// Routes: POST /v1/charges (critical), GET /v1/charges (default),
// GET /v1/reports (sheddable); any request with X-Test-Mode: true is
// test-mode traffic. The client is the X-API-Key header. ?work=2ms burns that
// much CPU (default 1ms). POST /admin/downstream?slowdown=3 makes the
// downstream three times slower (1: full speed again). /healthz, /metrics
// and /admin/ are never shed nor counted.
//
// It prints its address on the first line, then one line per second: what it
// admitted and shed, by priority.
package main

import (
	"os"

	"github.com/loadshed/loadshed/examples/server/api"
)

func main() {
	os.Exit(api.Main(os.Args[1:], os.Stdout, os.Stderr))
}
