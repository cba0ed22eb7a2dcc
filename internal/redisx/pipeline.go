package redisx

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipeline makes client send the scripts that concurrent decisions run
// (EVALSHA and EVAL) together, as a go-redis hook on the client, whichever
// layer or service runs them: each of flushers goroutines takes the first
// waiting script and every other one queued behind it, up to
// maxPipelined, and sends them as one pipeline, one write and one read for
// the batch instead of one each. Nothing waits for a batch to fill: a lone
// request goes out at once, and batches grow only with concurrency. It
// returns a function that stops the flushers (call it after the last
// decision, before closing the client).
//
// The client must not retry commands (MaxRetries -1): a pipeline re-sent
// after a broken connection would run its scripts twice.
func Pipeline(client redis.UniversalClient, flushers int) (stop func()) {
	p := &pipeliner{client: client, queue: make(chan *pending, 4096), quit: make(chan struct{})}
	for range max(flushers, 1) {
		p.wg.Add(1)
		go p.flush()
	}
	client.AddHook(p)
	return func() {
		p.once.Do(func() { close(p.quit) })
		p.wg.Wait()
	}
}

const maxPipelined = 128

// maxPipelineWait bounds a batch whose requests all have no deadline.
const maxPipelineWait = 5 * time.Second

type pipeliner struct {
	client redis.UniversalClient
	queue  chan *pending
	quit   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// scriptCmd is what the hook pipelines: a *redis.Cmd, possibly wrapped.
type scriptCmd interface {
	redis.Cmder
	SetVal(any)
}

type pending struct {
	ctx   context.Context
	cmd   scriptCmd
	state atomic.Int32 // 0 waiting, 1 answered, 2 abandoned
	done  chan struct{}
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func (p *pipeliner) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipeliner) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *pipeliner) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sc, ok := cmd.(scriptCmd)
		if !ok || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			return next(ctx, cmd)
		}
		// A select with the queue open and the context done picks either:
		// a caller already gone must not have its script run.
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err)
			return err
		}
		pd := pendingPool.Get().(*pending)
		pd.ctx, pd.cmd = ctx, sc
		pd.state.Store(0)
		select {
		case p.queue <- pd:
		case <-ctx.Done():
			pd.ctx, pd.cmd = nil, nil
			pendingPool.Put(pd)
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		case <-p.quit:
			pd.ctx, pd.cmd = nil, nil
			pendingPool.Put(pd)
			return next(ctx, cmd)
		}
		select {
		case <-pd.done:
		case <-ctx.Done():
			if pd.state.CompareAndSwap(0, 2) {
				// The flusher drops the answer; pd is not reused.
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
			<-pd.done // answered meanwhile
		}
		pd.ctx, pd.cmd = nil, nil
		pendingPool.Put(pd)
		return cmd.Err()
	}
}

func (p *pipeliner) flush() {
	defer p.wg.Done()
	batch := make([]*pending, 0, maxPipelined)
	cmds := make([]*redis.Cmd, 0, maxPipelined)
	for {
		var first *pending
		select {
		case first = <-p.queue:
		case <-p.quit:
			return
		}
		batch = append(batch[:0], first)
		// Let the decisions already runnable queue theirs first: woken by
		// the first send, a flusher runs before them and would take a
		// batch of one (1.5 scripts a read on one CPU, measured; about 5
		// with the yield, and 18 % more decisions a second).
		runtime.Gosched()
	drain:
		for len(batch) < maxPipelined {
			select {
			case pd := <-p.queue:
				batch = append(batch, pd)
			default:
				break drain
			}
		}
		// The batch runs until its last caller's deadline: callers whose
		// deadline passes first stop waiting on their own.
		deadline := time.Now().Add(maxPipelineWait)
		latest := time.Time{}
		for _, pd := range batch {
			if d, ok := pd.ctx.Deadline(); ok && d.After(latest) {
				latest = d
			}
		}
		if !latest.IsZero() && latest.Before(deadline) {
			deadline = latest
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		pipe := p.client.Pipeline()
		cmds = cmds[:0]
		for _, pd := range batch {
			c := redis.NewCmd(ctx, pd.cmd.Args()...)
			cmds = append(cmds, c)
			// NoRetry: go-redis must not re-send the batch (see the client's
			// MaxRetries above). On a Cluster it would otherwise send a
			// node's batch whose first reply is TRYAGAIN again whole, beside
			// the commands already redirected by an ASK, and read two copies
			// of a command at once; the callers retry what did not run.
			_ = pipe.Process(ctx, onceCmd{c})
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		for i, pd := range batch {
			if !pd.state.CompareAndSwap(0, 1) {
				continue // abandoned
			}
			c := cmds[i]
			if err := c.Err(); err != nil {
				pd.cmd.SetErr(err)
			} else {
				pd.cmd.SetVal(c.Val())
			}
			pd.done <- struct{}{}
		}
	}
}
