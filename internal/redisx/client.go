package redisx

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// IsOutage tells a Redis that is gone, slow or unable to serve (network
// errors, timeouts, a loading, busy or read-only server, a cluster that is
// down) from one that answered with an error for this request alone (say
// WRONGTYPE), which is no reason to stop asking it. A Cluster's
// redirections and TRYAGAIN (a slot migrating) are no outage: the cluster
// works, this key's slot is moving.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	for _, p := range [...]string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// NotRun reports a Cluster reply that says the command did not run and
// may run elsewhere or a moment later: a redirection go-redis stopped
// following (MOVED, ASK), a slot migrating with the keys split (TRYAGAIN),
// a cluster without a master for some slot (CLUSTERDOWN), a node loading
// its data (LOADING). Retrying such a command never runs it twice.
func NotRun(err error) bool {
	if err == nil {
		// Before rerr: errors.As moves it to the heap, and every command
		// that ran (nearly all) would pay that allocation for nothing.
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range [...]string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// RetryBackoff is the first wait before a command that did not run (NotRun)
// is sent again; each retry doubles it, up to MaxRetryBackoff.
const (
	RetryBackoff    = time.Millisecond
	MaxRetryBackoff = 8 * time.Millisecond
)

// Again reports whether a command that failed with err on its attempt-th
// try (0 for the first) should be sent again: it did not run (NotRun),
// and ctx leaves time for the backoff and a round trip after it. It waits
// the backoff before it answers true. Callers loop:
//
//	for attempt := 0; ; attempt++ {
//		err = run()
//		if !redisx.Again(ctx, err, attempt) {
//			break
//		}
//	}
//
// so that a slot moving or a failover in progress costs retries within
// the request's Redis budget, not a fallback.
func Again(ctx context.Context, err error, attempt int) bool {
	if !NotRun(err) || ctx.Err() != nil {
		return false
	}
	wait := min(RetryBackoff<<min(attempt, 8), MaxRetryBackoff)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*wait {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Retry runs run, and runs it again while Again says so (a reply saying
// the command did not run, with time left in ctx for another try). It
// returns run's last error, except in one case: when a try after a NotRun
// reply fails only because ctx's deadline passed (a round trip slowed past
// the budget's end), it returns that NotRun reply instead. The node
// answered within this budget, its slot is moving: that is no outage, and a
// bare deadline error would read as one (IsOutage) and send every key of
// the node to the fallback.
func Retry(ctx context.Context, run func() error) error {
	var notRun error
	for attempt := 0; ; attempt++ {
		err := run()
		if NotRun(err) {
			notRun = err
		} else if err != nil && notRun != nil && deadlinePassed(ctx) {
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				return notRun
			}
		}
		if !Again(ctx, err, attempt) {
			return err
		}
	}
}

// deadlinePassed reports whether ctx has ended or its deadline is past.
func deadlinePassed(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// CallerGone reports whether the caller's own context has ended: cancelled,
// or past its deadline. A round trip cut short by it says nothing about
// Redis. The deadline is read too, since a read that timed out at the
// caller's deadline can return before the context's timer marks it done.
func CallerGone(ctx context.Context) bool { return deadlinePassed(ctx) }

// Reload asks a Cluster client (any client with a ReloadState method, as
// *redis.ClusterClient has) to reload its slot map in the background.
// go-redis otherwise reloads it every ClusterStateReloadInterval (60s by
// default) or on a MOVED, which a dead node never sends: after a failover
// it would keep sending the dead master's slots to it for a minute. go-redis
// coalesces the calls (one reload at a time, 200ms apart at most), so
// callers call it on every failure.
func Reload(c redis.UniversalClient) {
	if r, ok := c.(interface{ ReloadState(context.Context) }); ok {
		r.ReloadState(context.Background())
	}
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
