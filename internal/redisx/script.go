package redisx

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script run by its SHA1 (EVALSHA), loaded again when the
// server lacks it (a restart or SCRIPT FLUSH empties the cache).
//
// Retries: go-redis re-sends a command whose connection broke before its
// reply came (Options.MaxRetries, 3 by default), so a script run with Run
// may run twice for one call, and RunAll re-sends a call whose reply said
// it did not run. Scripts run that way must be
// idempotent: running one twice leaves the state running it once leaves
// (concurrency acquire, release and renew; presence), and then the retry is
// welcome, as it saves a decision from the fallback. Scripts that are not
// (a rate-limit decision or refund) run with RunOnce, which go-redis never
// re-sends.
type Script struct {
	s   *redis.Script
	src string
	// The first arguments of EVALSHA and EVAL, boxed once: boxing a string
	// allocates, and RunOnce is on every decision's path.
	evalsha, eval [2]any
}

// NewScript returns the script of src.
func NewScript(src string) *Script {
	s := &Script{s: redis.NewScript(src), src: src}
	s.evalsha, s.eval = [2]any{"evalsha", s.s.Hash()}, [2]any{"eval", src}
	return s
}

// Run runs the script: EVALSHA, then EVAL if the server lacks it.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c, keys, args...)
}

// Load loads the script into the server's cache (SCRIPT LOAD), so that the
// first run needs no EVAL.
func (s *Script) Load(ctx context.Context, c redis.Scripter) error {
	return s.s.Load(ctx, c).Err()
}

// Hash returns the script's SHA1.
func (s *Script) Hash() string { return s.s.Hash() }

// Call is one run of a script in RunAll.
type Call struct {
	Keys []string
	Args []any
}

// RunAll runs s once for each call in one pipeline (one round trip) and
// returns each call's command, in order. The calls whose reply says the
// script did not run (NotRun: on a Cluster, a slot migrating) are sent
// again within ctx (see Again), as is the whole pipeline once more after
// loading the script if the server lacked it. Every script run through
// RunAll must be safe to run twice (see Script).
//
// go-redis never re-sends the pipeline's commands itself (they are
// NoRetry), though it still follows MOVED and ASK: on a Cluster, a node's
// batch whose first reply is TRYAGAIN would otherwise be sent again whole,
// beside the commands of the batch already redirected by an ASK, and the
// two copies of a command would be read by two goroutines at once.
func (s *Script) RunAll(ctx context.Context, c redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	loaded := false
	for attempt := 0; len(todo) > 0; attempt++ {
		pipe := c.Pipeline()
		for _, i := range todo {
			cmds[i] = s.cmd(ctx, s.evalsha, calls[i].Keys, calls[i].Args)
			_ = pipe.Process(ctx, onceCmd{cmds[i]})
		}
		_, _ = pipe.Exec(ctx)
		again := todo[:0]
		lacked := false
		var notRun error
		for _, i := range todo {
			switch err := cmds[i].Err(); {
			case noScript(cmds[i]):
				lacked = true
				again = append(again, i)
			case NotRun(err):
				notRun = err
				again = append(again, i)
			}
		}
		todo = again
		switch {
		case len(todo) == 0:
		case lacked:
			if loaded || s.s.Load(ctx, c).Err() != nil {
				return cmds
			}
			loaded = true
		case attempt+1 >= maxRunAllTries || !Again(ctx, notRun, attempt):
			return cmds
		}
	}
	return cmds
}

// maxRunAllTries bounds RunAll's tries of a call that keeps not running
// (a slot migrating for longer than ctx, or ctx without a deadline).
const maxRunAllTries = 8

// onceCmd is a command go-redis never re-sends: after a broken connection
// it fails instead of running the script a second time.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// RunOnce runs the script as Run does, but go-redis never re-sends it: a
// connection broken after the request left (the script may have run, its
// reply is lost) is an error, not a second run. It is for the scripts that
// are not safe to run twice (a rate-limit decision would charge its units
// twice, a refund give them back twice); the caller treats the error as an
// outage and decides locally. It is also for the scripts on a request's
// path (and the fleet's tick): a Cluster's TRYAGAIN or CLUSTERDOWN comes
// back at once, for the caller to retry within its budget (Again), rather
// than being retried by go-redis from an 8ms backoff up, which ends a short
// budget with a bare deadline error that reads as an outage.
func (s *Script) RunOnce(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := s.cmd(ctx, s.evalsha, keys, args)
	_ = c.Process(ctx, onceCmd{cmd})
	if noScript(cmd) {
		cmd = s.cmd(ctx, s.eval, keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

// cmd builds the command: head is the command's name and the script's SHA1
// or source.
func (s *Script) cmd(ctx context.Context, head [2]any, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, head[0], head[1], len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return redis.NewCmd(ctx, a...)
}

// noScript reports whether the server lacked the script. The nil check
// first: redis.HasErrorPrefix allocates (errors.As into a variable of its
// own) even for no error, on every decision.
func noScript(cmd *redis.Cmd) bool {
	err := cmd.Err()
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
