package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuMeter reads the CPU time the benchmark process and the redis-server
// have spent, so that the Redis rows can report CPU per decision on each
// side: on a 2-core machine shared by client and server, throughput is
// bounded by their sum, and CPU time is far steadier than decisions/s when
// other work shares the machine.
type cpuMeter struct {
	// info asks the server for INFO cpu on a client of its own, so that the
	// round-trip counter does not see it.
	info *redis.Client
}

func newCPUMeter(tb testing.TB, c *redis.Client) cpuMeter {
	opt := *c.Options()
	info := redis.NewClient(&opt)
	tb.Cleanup(func() { info.Close() })
	return cpuMeter{info: info}
}

// read returns the process's and the server's CPU time so far (user +
// system); server is negative when INFO cpu could not be read.
func (m cpuMeter) read() (client, server time.Duration) {
	client = processCPU()
	server = -1
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := m.info.Info(ctx, "cpu").Result()
	if err != nil {
		return client, server
	}
	var sec float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return client, server
			}
			sec += f
		}
	}
	return client, time.Duration(sec * float64(time.Second))
}

// report adds client-µs/op and server-µs/op: CPU time per decision of the
// benchmark process (client, goroutines and runtime) and of redis-server
// since client0 and server0.
func (m cpuMeter) report(b *testing.B, client0, server0 time.Duration) {
	client, server := m.read()
	if client >= 0 && client0 >= 0 {
		b.ReportMetric(float64(client-client0)/1e3/float64(b.N), "client-µs/op")
	}
	if server >= 0 && server0 >= 0 {
		b.ReportMetric(float64(server-server0)/1e3/float64(b.N), "server-µs/op")
	}
}
