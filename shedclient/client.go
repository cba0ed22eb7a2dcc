// Package shedclient is the caller's half of load shedding: an
// http.RoundTripper (and, in package shedclientgrpc, gRPC client
// interceptors) that stops sending what a loaded service would reject, so
// that it keeps its CPU for the work it admits.
//
//	client := &http.Client{Transport: shedclient.New(shedclient.Config{}).Transport(nil)}
//
// For every destination (an HTTP host, a gRPC target) it
//
//   - honours Retry-After (seconds and HTTP-date, RFC 9110) and the
//     RateLimit / RateLimit-Policy fields of
//     draft-ietf-httpapi-ratelimit-headers, per policy and partition key:
//     while the server has said a quota is spent until t, requests under
//     it wait (up to their deadline and Config.MaxWait) or fail at once
//     with a *QuotaError, without being sent;
//   - throttles adaptively, as Google's SRE book describes: over a sliding
//     window, it rejects locally with probability
//     max(0, (requests − K·accepts) / (requests + 1)), per priority, so
//     that a sheddable flood being shed does not throttle critical calls;
//   - retries rejected requests (429 / 503, RESOURCE_EXHAUSTED /
//     UNAVAILABLE) within a retry budget (a fraction of requests), with
//     jittered exponential backoff never sooner than the server asked,
//     and never a non-idempotent request unless told;
//   - propagates the context's priority (shed.WithPriority) and deadline
//     (package propagation), so that a critical call stays critical in the
//     service it calls.
//
// Whatever a server sends (negative, huge, malformed values, dates in the
// past or in the year 9999), the client never waits past the request's
// deadline or Config.MaxWait, never holds more than Config.MaxMemory of
// what servers told it, and never panics.
package shedclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
)

// Defaults of Config.
const (
	DefaultK           = 2.0
	DefaultWindow      = 30 * time.Second
	DefaultRetryBudget = 0.1
	DefaultMaxRetries  = 2
	DefaultBackoff     = 50 * time.Millisecond
	DefaultMaxWait     = 10 * time.Second
	DefaultMaxBlock    = 5 * time.Minute
	DefaultMaxMemory   = 8 << 20
)

// Config configures a Client. The zero value is usable: every field has a
// default.
type Config struct {
	// K is the SRE book's multiplier: the client sends up to K times what
	// the destination accepts before it rejects locally (default 2; lower
	// is more aggressive). Negative disables adaptive throttling.
	K float64
	// Window is how far back throttling and the retry budget look
	// (default 30s).
	Window time.Duration
	// RetryBudget is the most retries may be, as a fraction of requests,
	// per destination over Window (default 0.1). Negative disables retries.
	RetryBudget float64
	// MaxRetries bounds the retries of one request (default 2).
	MaxRetries int
	// Backoff is the first retry's base delay, doubled for each further
	// retry, full jitter (default 50ms). A server's Retry-After or pushback
	// longer than it wins.
	Backoff time.Duration
	// MaxWait bounds any wait: for a spent quota, before a retry (default
	// 10s). A request whose wait would be longer, or end past its
	// deadline, fails at once instead.
	MaxWait time.Duration
	// MaxBlock bounds how long a spent quota is remembered, whatever the
	// server said (default 5 minutes).
	MaxBlock time.Duration
	// MaxMemory bounds, in bytes, what the client remembers of all its
	// destinations together: their counters, their scopes, the policies
	// and partition keys the servers named and which of them are spent
	// (default 8 MiB). Past it, what was used least recently is forgotten
	// first, which costs at most a request the server refuses: the client
	// learns again from its answer. The bytes are estimated on the high
	// side, so that the heap the client holds stays within the bound.
	MaxMemory int64
	// NoWait makes requests under a spent quota fail at once with a
	// *QuotaError instead of waiting for it.
	NoWait bool
	// RetryNonIdempotent retries requests that are not idempotent (POST,
	// PATCH, gRPC methods Idempotent does not name). Off by default.
	RetryNonIdempotent bool
	// HTTPScope, when set, splits an HTTP host into scopes whose quotas
	// are remembered apart (a route group, a user whose quota is
	// partitioned): a spent quota holds back only requests of the scope
	// the server named it for. Default: the whole host is one scope.
	// Each scope the server names policies for takes memory within
	// MaxMemory. gRPC calls are scoped by method.
	HTTPScope func(*http.Request) string
	// Idempotent, when set, names the gRPC methods that are safe to retry
	// (package shedclientgrpc).
	Idempotent func(method string) bool
	// Token is sent with a propagated priority (Loadshed-Token), for
	// servers that believe callers presenting it.
	Token string
	// NoPropagation stops the client from sending the context's priority
	// and deadline.
	NoPropagation bool
	// Clock is read for time and timers (default shed.SystemClock).
	Clock shed.Clock
}

// ErrThrottled matches, with errors.Is, every error of a request the
// client did not send: a *QuotaError or a *ThrottleError.
var ErrThrottled = errors.New("shedclient: request not sent")

// QuotaError is returned for a request the client did not send because
// the server said its quota is spent.
type QuotaError struct {
	// Destination is the host or target; Policy the spent quota's name.
	Destination, Policy string
	// RetryAfter is how long until the server said the quota comes back.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("shedclient: quota %q of %s is spent for %v more: request not sent", e.Policy, e.Destination, e.RetryAfter)
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *QuotaError) Is(target error) bool { return target == ErrThrottled }

// ThrottleError is returned for a request the client rejected itself:
// the destination has been rejecting most of what it was sent.
type ThrottleError struct {
	Destination string
	Priority    shed.Priority
	// Probability is the chance the client had of rejecting it.
	Probability float64
}

func (e *ThrottleError) Error() string {
	return fmt.Sprintf("shedclient: %s rejects most %s requests (throttling %.0f%%): request not sent", e.Destination, e.Priority, 100*e.Probability)
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottleError) Is(target error) bool { return target == ErrThrottled }

// Client keeps what it learnt of each destination. It is safe for
// concurrent use; share one across the transports and connections of a
// process.
type Client struct {
	cfg   Config
	clock shed.Clock
	// mu guards dests and what the client remembers of each (all but
	// its counters), on the list mem.
	mu    sync.Mutex
	dests map[string]*dest
	mem   recency
}

// New returns a Client with cfg's defaults filled in.
func New(cfg Config) *Client {
	if cfg.K == 0 {
		cfg.K = DefaultK
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.RetryBudget == 0 {
		cfg.RetryBudget = DefaultRetryBudget
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.MaxBlock <= 0 {
		cfg.MaxBlock = DefaultMaxBlock
	}
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = DefaultMaxMemory
	}
	c := &Client{cfg: cfg, clock: clockx.Or(cfg.Clock), dests: make(map[string]*dest)}
	c.mem.init()
	return c
}

func (c *Client) dest(name string) *dest {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dests[name]
	if d == nil {
		name = strings.Clone(name)
		d = newDest(name, c.cfg.Window)
		c.dests[name] = d
		c.mem.add(&d.memo, d, destBytes(name))
		c.trim()
	} else {
		c.mem.touch(&d.memo)
	}
	return d
}

// answer is what one attempt taught the client.
type answer struct {
	// rejected: the server said 429 / 503 (or their gRPC codes).
	rejected bool
	// quota: the rejection is the client's own quota (429,
	// RESOURCE_EXHAUSTED), not the service's capacity.
	quota bool
	// retryAfter is the server's delay; ok false when it gave none, or
	// said not to retry.
	retryAfter   time.Duration
	hasRetry     bool
	noRetry      bool
	limits       []limitItem // RateLimit
	policies     []limitItem // RateLimit-Policy
	transportErr bool
	// timedOut: the request's deadline passed before an answer. The
	// destination did not accept it in time, which throttling counts as
	// it counts a rejection (it is never retried: no time is left).
	timedOut bool
	// pending: the answer comes later (a stream's first message), and
	// is counted then.
	pending bool
}

// call is one request through the client: send makes one attempt.
type call struct {
	dest       *dest
	scope      string // what policies are remembered for: a gRPC method, an HTTP host
	priority   shed.Priority
	idempotent bool
	// replayable: the request can be sent again (an HTTP body that
	// GetBody can rebuild).
	replayable bool
	send       func(ctx context.Context, attempt int) answer
}

// run makes the attempts of one call: the quota gate, the throttle, the
// send and, on a rejection, the retries the budget allows. It returns nil
// when the last attempt was sent (its answer is the caller's to return),
// or the error that stopped it.
func (c *Client) run(ctx context.Context, cl call) error {
	d := cl.dest
	for attempt := 0; ; attempt++ {
		now := c.clock.Now()
		if policy, until := c.spent(d, cl.scope, now); !until.IsZero() {
			wait := until.Sub(now)
			if c.cfg.NoWait || !c.fits(ctx, now, wait) {
				return &QuotaError{Destination: d.name, Policy: policyName(policy), RetryAfter: wait}
			}
			if err := c.sleep(ctx, wait); err != nil {
				return err
			}
			now = c.clock.Now()
		}
		if attempt == 0 && c.cfg.K > 0 {
			if p := d.rejectProbability(cl.priority, now, c.cfg.K); p > 0 && rand.Float64() < p {
				d.count(cl.priority, now, false)
				return &ThrottleError{Destination: d.name, Priority: cl.priority, Probability: p}
			}
		}
		d.attempt(now, attempt > 0)
		a := cl.send(ctx, attempt)
		now = c.clock.Now()
		if a.timedOut || !a.transportErr && !a.pending {
			d.count(cl.priority, now, !a.rejected && !a.timedOut)
		}
		c.learn(d, cl.scope, &a, now)
		if !a.rejected || a.noRetry || attempt >= c.cfg.MaxRetries || c.cfg.RetryBudget < 0 {
			return nil
		}
		if !cl.replayable || !cl.idempotent && !c.cfg.RetryNonIdempotent {
			return nil
		}
		delay := c.backoff(attempt)
		if a.hasRetry && a.retryAfter > delay {
			delay = a.retryAfter
		}
		if !c.fits(ctx, now, delay) || !d.allowRetry(now, c.cfg.RetryBudget) {
			return nil
		}
		if err := c.sleep(ctx, delay); err != nil {
			return nil // the caller went away: it gets the last answer
		}
	}
}

// fits reports whether waiting d from now stays within MaxWait and
// ends before ctx's deadline.
func (c *Client) fits(ctx context.Context, now time.Time, d time.Duration) bool {
	if d < 0 || d > c.cfg.MaxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !now.Add(d).Before(dl) {
		return false
	}
	return true
}

// backoff is the jittered delay before retry attempt+1: uniform in
// [0, Backoff·2^attempt] (full jitter), at least a tenth of it.
func (c *Client) backoff(attempt int) time.Duration {
	b := c.cfg.Backoff << min(attempt, 20)
	if b <= 0 || b > c.cfg.MaxWait {
		b = c.cfg.MaxWait
	}
	return b/10 + time.Duration(rand.Int64N(int64(b-b/10)+1))
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	done := make(chan struct{})
	t := c.clock.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

func policyName(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == 0 {
			return id[:i]
		}
	}
	return id
}
