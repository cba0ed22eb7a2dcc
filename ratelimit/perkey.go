package ratelimit

import (
	"fmt"
	"time"
)

// PerKey returns a layer that admits n requests per period for each client
// key (shed.Request.Key), from an in-memory token bucket: the one-line rate
// limit, as go-chi/httprate's LimitByIP is. Its policy is "per-key"; Close
// stops the store's sweeper.
//
// It panics if n < 1 or period <= 0, as time.NewTicker does on a bad
// duration: the arguments are constants of the program. Build a Layer
// with New to get an error instead, and for anything more (other
// algorithms, several rules, Redis).
func PerKey(n int64, period time.Duration) *Layer {
	l, err := perKey(n, period)
	if err != nil {
		panic(err)
	}
	return l
}

func perKey(n int64, period time.Duration) (*Layer, error) {
	if n < 1 || period <= 0 {
		return nil, fmt.Errorf("ratelimit: PerKey(%d, %v): want at least 1 request per positive period", n, period)
	}
	store, err := NewMemory(TokenBucket, Per(n, period), MemoryConfig{})
	if err != nil {
		return nil, fmt.Errorf("ratelimit: PerKey: %w", err)
	}
	l, err := New(Config{Rules: []Rule{{Name: "per-key", Descriptors: []Descriptor{ByClient}, Store: store}}})
	if err != nil {
		store.Close()
		return nil, err
	}
	l.rules[0].ownStore = store
	return l, nil
}
