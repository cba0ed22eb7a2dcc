package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/loadshed/loadshed/internal/redisx"
)

var (
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/div.lua
	luaDiv string
	//go:embed lua/state.lua
	luaState string
	//go:embed lua/window.lua
	luaWindow string
	//go:embed lua/muldiv.lua
	luaMuldiv string
	//go:embed lua/bucket.lua
	luaBucket string
	//go:embed lua/fixed_window.lua
	luaFixedWindow string
	//go:embed lua/sliding_window.lua
	luaSlidingWindow string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
)

// One script per algorithm, each the shared prelude, the helpers it uses
// and the algorithm's body, run through EVALSHA and, when the server does
// not have it yet, EVAL. Redis runs the whole script on every call, making
// each local function afresh, so a script holds only the helpers it calls.
var (
	scriptBucket        = redisx.NewScript(luaPrelude + luaDiv + luaState + luaBucket)
	scriptFixedWindow   = redisx.NewScript(luaPrelude + luaWindow + luaFixedWindow)
	scriptSlidingWindow = redisx.NewScript(luaPrelude + luaDiv + luaState + luaWindow + luaMuldiv + luaSlidingWindow)
	scriptSlidingLog    = redisx.NewScript(luaPrelude + luaDiv + luaSlidingLog)
)

func scriptFor(alg Algorithm) *redisx.Script {
	switch alg {
	case FixedWindow:
		return scriptFixedWindow
	case SlidingWindow:
		return scriptSlidingWindow
	case SlidingLog:
		return scriptSlidingLog
	}
	return scriptBucket
}

const (
	opAllow  = "a"
	opRefund = "r"
	opPeek   = "p" // answers as opAllow would, writing nothing
)

// maxFigures is the most limit figures a script reads (ARGV[5…]).
const maxFigures = 3

// staticArgs are the script arguments fixed by the limit (ARGV[5…]: only
// those the algorithm's script reads, each argument costing the server
// and the client), formatted and boxed once, so that a decision does not
// allocate them again.
type staticArgs struct {
	figures [maxFigures]any
	n       int
}

func newStaticArgs(alg Algorithm, l Limit) staticArgs {
	f := func(v int64) any { return strconv.FormatInt(v, 10) }
	var s staticArgs
	switch alg {
	case TokenBucket, LeakyBucket:
		// tau and T: validateRedisLimit keeps Burst × T below 2^52.
		t := max(int64(l.Interval()), 1)
		s.figures, s.n = [maxFigures]any{f(l.BurstOrQuantity() * t), f(t)}, 2
	case FixedWindow, SlidingWindow:
		sec := int64(0)
		if l.Period%time.Second == 0 {
			sec = int64(l.Period / time.Second)
		}
		s.figures, s.n = [maxFigures]any{f(l.Quantity), f(int64(l.Period)), f(sec)}, 3
	case SlidingLog:
		s.figures, s.n = [maxFigures]any{f(l.Quantity), f(int64(l.Period))}, 2
	}
	return s
}

// Boxed once: converting a string to an interface allocates.
var (
	argAllow  any = opAllow
	argRefund any = opRefund
	argPeek   any = opPeek
)

// callFrame holds one round trip's keys and arguments; frames are pooled,
// as go-redis copies both into its own command before it returns.
type callFrame struct {
	keys [1]string
	args [4 + maxFigures]any
}

var callFrames = sync.Pool{New: func() any { return new(callFrame) }}

// reply is a script's answer.
type reply struct {
	allowed   bool
	taken     int64
	remaining int64
	retry     int64 // ns until want units fit
	reset     int64 // ns until the limit is whole again
	retry1    int64 // ns until one unit fits
}

func (p reply) result(limit int64) Result {
	r := Result{Allowed: p.allowed, Limit: limit, Remaining: p.remaining,
		ResetAfter: time.Duration(max(p.reset, 0))}
	if !p.allowed {
		r.RetryAfter = time.Duration(max(p.retry, 0))
	}
	return r
}

// call runs the algorithm's script on the Redis key rk within ctx (the
// store's timeout), asking for at least want and at most takeMax units.
func (r *Redis) call(ctx context.Context, op, rk string, want, takeMax int64) (reply, error) {
	f := callFrames.Get().(*callFrame)
	defer func() {
		*f = callFrame{}
		callFrames.Put(f)
	}()
	f.keys[0] = rk
	switch op {
	case opRefund:
		f.args[0] = argRefund
	case opPeek:
		f.args[0] = argPeek
	default:
		f.args[0] = argAllow
	}
	if r.now != nil {
		// A test's fixed clock rides in the op ("<op> <s> <ns>", see
		// prelude.lua), so that no argument is spent on it otherwise.
		t := r.now()
		f.args[0] = op + " " + strconv.FormatInt(t.Unix(), 10) + " " + strconv.Itoa(t.Nanosecond())
	}
	f.args[1], f.args[2], f.args[3] = want, takeMax, r.ttlSlackArg
	n := 4 + copy(f.args[4:], r.args.figures[:r.args.n])
	args := f.args[:n]
	// RunOnce: a decision run twice would charge twice, and a refund give
	// back twice (see redisx.Script).
	res, err := r.script.RunOnce(ctx, r.client, f.keys[:], args...).Result()
	if err != nil {
		return reply{}, err
	}
	if packed, ok := res.(int64); ok && r.alg == FixedWindow {
		return r.unpack(packed, takeMax), nil
	}
	v, ok := res.([]any)
	if !ok {
		return reply{}, fmt.Errorf("ratelimit: redis script for %v replied %T, want an array", r.alg, res)
	}
	var n6 [6]int64
	if len(v) != len(n6) {
		return reply{}, fmt.Errorf("ratelimit: redis script for %v replied %d values, want 6", r.alg, len(v))
	}
	for i, x := range v {
		var ok bool
		if n6[i], ok = x.(int64); !ok {
			return reply{}, fmt.Errorf("ratelimit: redis script for %v replied %T in place %d, want an integer", r.alg, x, i+1)
		}
	}
	return reply{allowed: n6[0] == 1, taken: n6[1], remaining: n6[2], retry: n6[3], reset: n6[4], retry1: n6[5]}, nil
}

// unpack reads the fixed window's reply to an admitted request that took
// takeMax: one integer, remaining × (P + 1) + reset in ns, instead of an
// array, which costs the server 0.7 µs more (fixed_window.lua).
func (r *Redis) unpack(packed, takeMax int64) reply {
	p1 := int64(r.limit.Period) + 1
	rep := reply{allowed: true, taken: takeMax, remaining: packed / p1, reset: packed % p1}
	if rep.remaining < 1 {
		rep.retry1 = rep.reset
	}
	return rep
}
