package concurrency

import "fmt"

// PerKey returns a layer that lets at most n requests of each client key
// (shed.Request.Key) be in flight at once, answering 429 past it: the
// one-line in-flight cap.
//
// It panics if n < 1, as time.NewTicker does on a bad duration: the
// argument is a constant of the program. Use New to get an error instead,
// and for anything more (an overall limit, per route, adaptive, queueing).
func PerKey(n int64) *Layer {
	if n < 1 {
		panic(fmt.Sprintf("concurrency: PerKey(%d): want at least 1", n))
	}
	l, err := New(Config{PerKey: n, KeyBy: KeyByClient})
	if err != nil {
		panic(err)
	}
	return l
}
