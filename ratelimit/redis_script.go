package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/bucket.lua
	luaBucket string
	//go:embed lua/fixed_window.lua
	luaFixedWindow string
	//go:embed lua/sliding_window.lua
	luaSlidingWindow string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
)

// One script per algorithm, each the shared prelude and the algorithm's
// body, run through EVALSHA and, when the server does not have it yet, EVAL.
var (
	scriptBucket        = redis.NewScript(luaPrelude + luaBucket)
	scriptFixedWindow   = redis.NewScript(luaPrelude + luaFixedWindow)
	scriptSlidingWindow = redis.NewScript(luaPrelude + luaSlidingWindow)
	scriptSlidingLog    = redis.NewScript(luaPrelude + luaSlidingLog)
)

func scriptFor(alg Algorithm) *redis.Script {
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
)

// staticArgs are the script arguments fixed by the limit, formatted and
// boxed once, so that a decision does not allocate them again.
type staticArgs struct {
	quantity, burst, period, periodSec, interval any
}

func newStaticArgs(l Limit) staticArgs {
	s := staticArgs{
		quantity:  strconv.FormatInt(l.Quantity, 10),
		burst:     strconv.FormatInt(l.BurstOrQuantity(), 10),
		period:    strconv.FormatInt(int64(l.Period), 10),
		periodSec: "0",
		interval:  strconv.FormatInt(max(int64(l.Interval()), 1), 10),
	}
	if l.Period%time.Second == 0 {
		s.periodSec = strconv.FormatInt(int64(l.Period/time.Second), 10)
	}
	return s
}

// Boxed once: converting a string to an interface allocates.
var (
	argAllow  any = opAllow
	argRefund any = opRefund
	argNone   any = ""
)

// callFrame holds one round trip's keys and arguments; frames are pooled,
// as go-redis copies both into its own command before it returns.
type callFrame struct {
	keys [1]string
	args [11]any
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

// call runs the algorithm's script for key under the store's timeout,
// asking for at least want and at most takeMax units.
func (r *Redis) call(ctx context.Context, op, key string, want, takeMax int64) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	f := callFrames.Get().(*callFrame)
	defer func() {
		*f = callFrame{}
		callFrames.Put(f)
	}()
	f.keys[0] = r.RedisKey(key)
	a := &r.args
	f.args = [11]any{argAllow, want, takeMax, a.quantity, a.burst, a.period, a.periodSec, a.interval,
		r.ttlSlackArg, argNone, argNone}
	if op == opRefund {
		f.args[0] = argRefund
	}
	if r.now != nil {
		t := r.now()
		f.args[9], f.args[10] = strconv.FormatInt(t.Unix(), 10), strconv.Itoa(t.Nanosecond())
	}
	v, err := r.script.Run(ctx, r.client, f.keys[:], f.args[:]...).Int64Slice()
	if err != nil {
		return reply{}, err
	}
	if len(v) != 6 {
		return reply{}, fmt.Errorf("ratelimit: redis script for %v replied %d values, want 6", r.alg, len(v))
	}
	return reply{allowed: v[0] == 1, taken: v[1], remaining: v[2], retry: v[3], reset: v[4], retry1: v[5]}, nil
}
