package redisx

import (
	"errors"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IsOutage tells a Redis that is gone, slow or unable to serve (network
// errors, timeouts, a loading, busy or read-only server, a cluster that is
// down) from one that answered with an error for this request alone (say
// WRONGTYPE), which is no reason to stop asking it.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	for _, p := range [...]string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "TRYAGAIN", "NOREPLICAS", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Errors of CheckClient; callers wrap them with the name of their field.
var (
	// ErrNilClient: no client, or a typed nil one.
	ErrNilClient = errors.New("the redis client is nil")
	// ErrNoContextTimeout: the client ignores context deadlines, so a slow
	// Redis would hold requests for its ReadTimeout instead of the layer's
	// timeout.
	ErrNoContextTimeout = errors.New("the redis client's options must set ContextTimeoutEnabled, or go-redis ignores context deadlines and a slow Redis stalls requests for its ReadTimeout")
)

// CheckClient refuses a nil client (typed nil included) and the clients it
// can inspect (*redis.Client, *redis.ClusterClient, *redis.Ring) whose
// ContextTimeoutEnabled is off. Other implementations are taken on trust.
func CheckClient(c redis.UniversalClient) error {
	if c == nil {
		return ErrNilClient
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return ErrNilClient
	}
	var on bool
	switch c := c.(type) {
	case *redis.Client:
		on = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		on = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		on = c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	if !on {
		return ErrNoContextTimeout
	}
	return nil
}
