package redisx

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script run by its SHA1 (EVALSHA), loaded again when the
// server lacks it (a restart or SCRIPT FLUSH empties the cache).
//
// Retries: go-redis re-sends a command whose connection broke before its
// reply came (Options.MaxRetries, 3 by default), so a script may run twice
// for one call. Every script the layers run is written to be safe under
// that: repeating it yields the same state as running it once (concurrency
// acquire, release, renew, presence), or errs towards refusing (a retried
// rate-limit decision charges its units twice, never admits more than the
// limit; docs/redis.md). The layers leave the client's retries on: a retry
// within the timeout saves a decision from the fallback.
type Script struct{ s *redis.Script }

// NewScript returns the script of src.
func NewScript(src string) *Script { return &Script{s: redis.NewScript(src)} }

// Run runs the script: EVALSHA, then EVAL if the server lacks it.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c, keys, args...)
}

// Hash returns the script's SHA1.
func (s *Script) Hash() string { return s.s.Hash() }

// Call is one run of a script in RunAll.
type Call struct {
	Keys []string
	Args []any
}

// RunAll runs s once for each call in one pipeline (one round trip) and
// returns each call's command, in order. If the server lacks the script it
// loads it and runs the pipeline once more: every script run through
// RunAll must be safe to run twice (see Script).
func (s *Script) RunAll(ctx context.Context, c redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 0 {
		return cmds
	}
	for attempt := 0; ; attempt++ {
		pipe := c.Pipeline()
		for i, call := range calls {
			cmds[i] = s.s.EvalSha(ctx, pipe, call.Keys, call.Args...)
		}
		_, _ = pipe.Exec(ctx)
		noScript := false
		for _, cmd := range cmds {
			if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				noScript = true
				break
			}
		}
		if !noScript || attempt == 1 || s.s.Load(ctx, c).Err() != nil {
			return cmds
		}
	}
}
