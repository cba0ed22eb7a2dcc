package redisx_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redistest"
	"github.com/loadshed/loadshed/internal/redisx"
)

// pipelineCounter counts what reaches the connection: single commands and
// pipelines, with the commands in them.
type pipelineCounter struct{ singles, pipelines, piped atomic.Int64 }

func (c *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.singles.Add(1)
		return next(ctx, cmd)
	}
}
func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		c.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Concurrent scripts go to Redis in pipelines, each answered with its own
// reply, and each runs once: 256 increments from 64 goroutines leave the
// count at 256 and every caller its own value. A caller gone before its
// answer gets its context's error.
func TestPipelineSendsConcurrentScriptsTogether(t *testing.T) {
	redistest.Client(t)
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	var count pipelineCounter
	stop := redisx.Pipeline(c, 2)
	t.Cleanup(stop)
	c.AddHook(&count) // after the pipeliner: it sees what the pipeliner sends
	key := "{" + redistest.Prefix(t) + "pipeline}"
	script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := script.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	const callers, each = 64, 4
	var wg sync.WaitGroup
	seen := make([]atomic.Bool, callers*each+1)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				n, err := script.EvalSha(context.Background(), c, []string{key}).Int64()
				if err != nil {
					t.Error(err)
					return
				}
				if n < 1 || n > callers*each || seen[n].Swap(true) {
					t.Errorf("reply %d: out of range or given twice", n)
				}
			}
		}()
	}
	wg.Wait()
	if n, err := c.Get(context.Background(), key).Int64(); err != nil || n != callers*each {
		t.Fatalf("count %d (%v), want %d: a script ran twice or not at all", n, err, callers*each)
	}
	if count.piped.Load() < callers*each || count.pipelines.Load() >= count.piped.Load() {
		t.Errorf("%d pipelines of %d scripts in all: want the scripts sent together", count.pipelines.Load(), count.piped.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := script.EvalSha(ctx, c, []string{key}).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller: %v", err)
	}
}
