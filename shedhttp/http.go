package shedhttp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/internal/propagated"
	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"

	"github.com/go-chi/chi/v5"
)

// KeyErrorPolicy says what the middleware does with a request whose key
// cannot be extracted (Config.Key failed).
type KeyErrorPolicy uint8

const (
	// KeyFallbackClientIP keys the request on its client IP instead, as
	// Config.ClientIP resolves it (the default). A request without even
	// an IP (a Unix socket peer) shares the key "unknown".
	KeyFallbackClientIP KeyErrorPolicy = iota
	// KeyShared puts every such request under one shared key, "anonymous":
	// keyless traffic shares one quota.
	KeyShared
	// KeyReject answers 400 Bad Request with a problem document, before any
	// layer runs.
	KeyReject
)

// String returns the policy's name.
func (p KeyErrorPolicy) String() string {
	switch p {
	case KeyFallbackClientIP:
		return "fallback-client-ip"
	case KeyShared:
		return "shared"
	case KeyReject:
		return "reject"
	}
	return fmt.Sprintf("key-error-policy(%d)", uint8(p))
}

// Keys the middleware uses when it has none better.
const (
	// UnknownKey keys requests whose client has no IP address.
	UnknownKey = "unknown"
	// AnonymousKey keys every keyless request under KeyShared.
	AnonymousKey = "anonymous"
)

// DefaultMaxKeyLength is Config.MaxKeyLength's default.
const DefaultMaxKeyLength = 1024

// Config configures the HTTP middleware. The zero value keys requests on
// the peer's IP address, gives every route Default priority and cost 1, and
// answers rejections with the rejection's status, Retry-After, the
// RateLimit fields and a problem document.
type Config struct {
	// Key says who is asking (default: the client IP, see ClientIP).
	// Combine KeyHeader, KeyBearer, KeyClientIP, KeyFrom with KeyCombine.
	Key KeyFunc
	// OnKeyError says what happens when Key fails (default
	// KeyFallbackClientIP), unless KeyError is set.
	OnKeyError KeyErrorPolicy
	// KeyError, when set, decides instead of OnKeyError what happens to a
	// request whose key cannot be extracted (err is ErrNoKey,
	// ErrKeyTooLong or Key's own error): it returns the key to use and
	// true, or answers the request itself and returns false, and the chain
	// does not run. An empty key it returns counts as AnonymousKey.
	KeyError func(w http.ResponseWriter, r *http.Request, err error) (key string, ok bool)
	// MaxKeyLength bounds a key in bytes; a longer one counts as a Key
	// failure (default DefaultMaxKeyLength).
	MaxKeyLength int
	// ClientIP says which proxies to believe about the client's address,
	// for the default Key and for KeyFallbackClientIP (default: none; the
	// peer is the client). Build a ClientIP from the same ClientIPConfig
	// to use KeyClientIP inside a KeyCombine.
	ClientIP ClientIPConfig

	// Routes is the router used to find a request's route pattern when the
	// request has not been routed yet and carries no chi routing context:
	// when the middleware wraps a chi router from outside
	// (mw(router)) instead of being mounted in it. Inside a chi router it is
	// not needed: the router in the request's routing context is used.
	Routes chi.Routes
	// Priorities annotates route patterns with priorities (default: none).
	Priorities RoutePriorities
	// DefaultPriority is the priority of routes Priorities does not cover
	// (default Default).
	DefaultPriority shed.Priority
	// Priority, when set, has the last word on a request's priority: it is
	// given the request and the priority the context (shed.WithPriority)
	// or the route annotations gave it, and what it returns is final
	// (shed.Unset, or an invalid value, keeps the given one). Use it for
	// traffic that is known by its key, such as test-mode credentials.
	Priority func(r *http.Request, p shed.Priority) shed.Priority
	// Cost is how many units a request takes (default 1). Values below 1
	// count as 1.
	Cost func(r *http.Request) int64
	// Propagation, when set, believes the priority a trusted caller
	// propagated (Loadshed-Priority) over the route's, shortens the
	// request's deadline to the budget a caller sent (Loadshed-Budget),
	// and puts every admitted request's priority in the handler's context
	// (shed.WithPriority), so that the calls it makes carry it on (see
	// package propagation).
	Propagation *propagation.Config

	// Skip, when set and true for a request, sends it straight to the
	// handler without running the chain: health checks and metrics
	// scrapes that must never be shed or counted.
	Skip func(r *http.Request) bool

	// OnReject, when set, answers every rejection instead of the default
	// response (see WriteRejection); nothing else is written for it.
	OnReject func(w http.ResponseWriter, r *http.Request, rej *shed.Rejection)
	// DiscloseCapacity adds the limits that protect the service's own
	// capacity (shed.Quota.Service: an overall or per-route in-flight
	// limit, the fleet's, the worker's) to the RateLimit fields and
	// problem documents clients see. Off by default: the draft's security
	// considerations advise against telling clients what the service can
	// take. The client's own quotas are always shown.
	DiscloseCapacity bool
	// ShowDryRun adds the quotas of layers in dry run (shed.Quota.DryRun)
	// to the fields and problem documents clients see. Off by default, and
	// meant for testing a new limit: a dry-run limit is enforced on
	// nobody, so a client that honoured its fields would slow down for
	// nothing.
	ShowDryRun bool
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (a Unix time) for the tightest rate quota (the one
	// with the fewest units left among those with a window; a limit on
	// requests in flight only when no quota has a window), for clients that
	// only know those.
	LegacyHeaders bool
	// Clock is read for X-RateLimit-Reset (default SystemClock).
	Clock shed.Clock
}

// middleware is a checked Config bound to a chain.
type middleware struct {
	chain      *shed.Chain
	key        KeyFunc
	onKeyError KeyErrorPolicy
	keyError   func(http.ResponseWriter, *http.Request, error) (string, bool)
	maxKey     int
	clientIP   *ClientIP
	routes     chi.Routes
	table      routeTable
	// needRoute: a route annotation or the chain reads the route pattern;
	// otherwise finding it (routing the request a second time, when
	// mounted with r.Use) is skipped.
	needRoute bool
	priority  func(*http.Request, shed.Priority) shed.Priority
	cost      func(*http.Request) int64
	onReject  func(http.ResponseWriter, *http.Request, *shed.Rejection)
	skip      func(*http.Request) bool
	legacy    bool
	show      fieldFilter
	clock     shed.Clock
	trust     *propagated.Trust // Config.Propagation
	states    sync.Pool
	// policies interns the RateLimit-Policy values of rejections; sets
	// caches what admitted requests' fields need per set of policies.
	policies policyCache
	sets     *policySets
}

// New checks cfg and returns net/http middleware that runs every
// request through chain: usable as it is with chi's r.Use and r.With, and with
// any router that takes func(http.Handler) http.Handler.
//
// For each request it resolves the key, the route pattern (routing the
// request itself when mounted before the router has), the priority (the
// context's, else the route's annotation, then Config.Priority), the
// cost and the deadline (the request context's); runs the chain; answers a
// rejection (see Config.OnReject); and otherwise sets the RateLimit
// fields of the leases' quotas, calls the handler, and releases the leases
// exactly once: Dropped when the request's context ended, Failed when the
// handler panicked (the panic goes on) or answered 5xx, Completed
// otherwise. The middleware writes nothing once the handler has begun.
//
// The ResponseWriter the handler gets wraps the server's to see the status;
// it implements Flush, Hijack, ReadFrom, WriteString and Unwrap, so
// http.NewResponseController works through it.
//
// The chain stays the caller's: the Middleware's Close leaves it open.
// An invalid config is an error naming the field.
func New(chain *shed.Chain, cfg Config) (Middleware, error) {
	m, err := newMiddleware(chain, cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		if _, ok := next.(*closeRequest); ok {
			return nil // the chain is not ours to close
		}
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &httpHandler{m: m, next: next}
	}, nil
}

// MustNew is New for a config known to be valid, such as a literal in
// main: it panics on an invalid one, so that it fits inline in r.Use.
func MustNew(chain *shed.Chain, cfg Config) Middleware {
	mw, err := New(chain, cfg)
	if err != nil {
		panic(err)
	}
	return mw
}

func newMiddleware(c *shed.Chain, cfg Config) (*middleware, error) {
	if c == nil {
		return nil, errors.New("shedhttp: New called with a nil *shed.Chain")
	}
	var errs []error
	ip, err := newClientIP(cfg.ClientIP, "Config.ClientIP")
	if err != nil {
		errs = append(errs, err)
	}
	if cfg.OnKeyError > KeyReject {
		errs = append(errs, fmt.Errorf("shedhttp: Config.OnKeyError: unknown policy %d", cfg.OnKeyError))
	}
	if cfg.MaxKeyLength < 0 {
		errs = append(errs, fmt.Errorf("shedhttp: Config.MaxKeyLength must not be negative, got %d", cfg.MaxKeyLength))
	}
	rules, err := compileRoutes(cfg.Priorities, cfg.DefaultPriority, "Config.Priorities")
	if err != nil {
		errs = append(errs, err)
	}
	var trust *propagated.Trust
	if cfg.Propagation != nil {
		if trust, err = propagated.NewTrust(*cfg.Propagation, "shedhttp", "Config.Propagation"); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m := &middleware{
		chain: c, key: cfg.Key, onKeyError: cfg.OnKeyError, keyError: cfg.KeyError, maxKey: cfg.MaxKeyLength,
		clientIP: ip, routes: cfg.Routes, priority: cfg.Priority, cost: cfg.Cost,
		onReject: cfg.OnReject, skip: cfg.Skip, legacy: cfg.LegacyHeaders, show: newFieldFilter(cfg.DiscloseCapacity, cfg.ShowDryRun),
		clock: clockx.Or(cfg.Clock), trust: trust,
	}
	if m.key == nil {
		m.key = ip.Key
	}
	if m.maxKey == 0 {
		m.maxKey = DefaultMaxKeyLength
	}
	m.table.rules = rules
	m.needRoute = len(rules.exact) > 0 || len(rules.prefixes) > 0 || c.ReadsRoute()
	m.sets = newPolicySets(m.show)
	m.states.New = func() any { return new(httpState) }
	return m, nil
}

// httpState is what one request needs beyond its stack: the grant (too big
// to copy around, and it escapes) and the ResponseWriter wrapper. Both are
// recycled, so admitting a request allocates neither.
type httpState struct {
	grant shed.Grant
	rw    responseWriter
}

type httpHandler struct {
	m    *middleware
	next http.Handler
}

// ServeHTTP runs one request through the chain and, if admitted, the next
// handler.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	req, ok := m.request(w, r)
	if !ok {
		return
	}
	if m.trust != nil {
		var cancel func()
		r, cancel = m.propagate(r, req.Priority)
		defer cancel()
	}
	st := m.states.Get().(*httpState)
	if err := m.chain.Acquire(r.Context(), req, &st.grant); err != nil {
		m.recycle(st)
		m.rejected(w, r, err)
		return
	}
	if leases := st.grant.Leases(); len(leases) > 0 {
		if show, more := quotaFields(leases, m.show); show {
			m.writeLeaseFields(w.Header(), leases, more)
		}
	}
	st.rw.w = w
	returned := false
	defer func() {
		if !returned {
			// The handler panicked. Release, and let the panic go on; st
			// is not recycled, since a handler goroutine may still hold
			// its writer.
			st.grant.Release(shed.Failed)
		}
	}()
	h.next.ServeHTTP(&st.rw, r)
	returned = true
	st.grant.Release(outcomeOf(r, &st.rw))
	m.recycle(st)
}

// quotaFields reports, in one pass, whether the leases carry a quota the
// fields show, and whether one of them stands for several
// (shed.Lease.MoreQuotas).
func quotaFields(leases []shed.Lease, f fieldFilter) (show, more bool) {
	for i := range leases {
		show = show || shown(&leases[i].Quota, f)
		more = more || leases[i].MoreQuotas
	}
	return show, more
}

// writeLeaseFields sets the RateLimit fields of an admitted request's
// quotas, before the handler runs. With the policies' set cached, only the
// remaining units and reset times are formatted, straight into the
// response's fieldValues: one allocation, nothing else.
func (m *middleware) writeLeaseFields(h http.Header, leases []shed.Lease, more bool) {
	if more {
		leases = expandQuotas(leases)
	}
	set := m.sets.lookup(leases)
	if set == nil {
		m.writeLeaseFieldsSlow(h, leases)
		return
	}
	v := new(fieldValues)
	b := v.buf[:0]
	var t tightest
	j := 0
	for i := range leases {
		if q := &leases[i].Quota; shown(q, m.show) {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = ratefield.AppendLimitRest(append(b, set.starts[j]...), q, leases[i].Over)
			t.see(q)
			j++
		}
	}
	v.vals[0] = v.limitString(b)
	v.vals[1] = set.policy
	setQuotaFields(h, v.vals[1:2:2], v.vals[0:1:1], &t, m.legacy, m.now())
}

// expandQuotas returns one lease per quota of leases, for layers whose
// leases stand for several limits (shed.Lease.MoreQuotas), so that the
// fields name every policy that applies: each carries its quota and its
// lease's Over, which is all the fields read. Only requests through such
// a layer pay for it (one allocation).
func expandQuotas(leases []shed.Lease) []shed.Lease {
	var buf [shed.MaxLayers]shed.Quota
	out := make([]shed.Lease, 0, len(leases)+2)
	for i := range leases {
		for _, q := range leases[i].Quotas(buf[:0]) {
			out = append(out, shed.Lease{Quota: q, Over: leases[i].Over})
		}
	}
	return out
}

// writeLeaseFieldsSlow builds both fields afresh, for sets of policies
// that are not cached.
func (m *middleware) writeLeaseFieldsSlow(h http.Header, leases []shed.Lease) {
	var pb, lb [256]byte
	policy, limit := pb[:0], lb[:0]
	var t tightest
	for i := range leases {
		if q := &leases[i].Quota; shown(q, m.show) {
			policy, limit = appendQuota(policy, limit, q, leases[i].Over)
			t.see(q)
		}
	}
	writeQuotaFields(h, policy, limit, &t, m.legacy, m.now(), nil)
}

func (m *middleware) now() (t time.Time) {
	if m.legacy {
		return m.clock.Now()
	}
	return t
}

// recycle clears st and pools it. Only the leases the chain's layers can
// have written are cleared (it has len(layers) of them; the rest of the
// Grant's MaxLayers stay zero), instead of zeroing the whole Grant, which
// is over a kilobyte: the pooled state keeps no stale references either
// way.
func (m *middleware) recycle(st *httpState) {
	st.grant.Reset()
	st.rw = responseWriter{}
	m.states.Put(st)
}

func outcomeOf(r *http.Request, rw *responseWriter) shed.Outcome {
	switch {
	case r.Context().Err() != nil:
		return shed.Dropped
	case rw.status >= 500 && !rw.hijacked:
		return shed.Failed
	}
	return shed.Completed
}

// request resolves the shed Request for r. It answers r itself, and
// returns false, only when the key is missing and OnKeyError is KeyReject.
func (m *middleware) request(w http.ResponseWriter, r *http.Request) (shed.Request, bool) {
	var req shed.Request
	key, err := m.key(r)
	if err == nil && (key == "" || len(key) > m.maxKey) {
		err = ErrKeyTooLong
		if key == "" {
			err = ErrNoKey
		}
	}
	if err != nil && m.keyError != nil {
		var ok bool
		if key, ok = m.keyError(w, r, err); !ok {
			return req, false
		}
		if key == "" {
			key = AnonymousKey
		}
	} else if err != nil {
		switch m.onKeyError {
		case KeyShared:
			key = AnonymousKey
		case KeyReject:
			writeProblem(w, http.StatusBadRequest, "The request does not say who is asking.", nil)
			return req, false
		default:
			if key, err = m.clientIP.Key(r); err != nil {
				key = UnknownKey
			}
		}
	}
	req.Key = key

	prio := m.table.rules.def
	if m.needRoute {
		req.Route, prio = m.table.resolve(r.Method, routePattern(r, m.routes))
	}
	if p, ok := shed.PriorityFrom(r.Context()); ok && p.Valid() {
		prio = p
	}
	if m.trust != nil {
		if p, ok := m.propagatedPriority(r, key); ok {
			prio = p
		}
	}
	if m.priority != nil {
		if p := m.priority(r, prio); p.Valid() {
			prio = p
		}
	}
	req.Priority = prio
	req.Cost = 1
	if m.cost != nil {
		req.Cost = m.cost(r)
	}
	return req, true
}

// rejected answers a request the chain did not admit. Nothing has been
// written yet: the handler never ran.
func (m *middleware) rejected(w http.ResponseWriter, r *http.Request, err error) {
	rej, ok := err.(*shed.Rejection)
	if !ok {
		rej, ok = asRejection(err)
	}
	if !ok {
		if r.Context().Err() != nil {
			return // the client went away while queued: nobody to answer
		}
		writeProblem(w, http.StatusServiceUnavailable, "The service cannot take the request now.", nil)
		return
	}
	if m.onReject != nil {
		m.onReject(w, r, rej)
		return
	}
	writeRejection(w, rej, m.legacy, m.show, m.now(), &m.policies)
}

// asRejection is errors.As for a wrapped rejection, apart so that the
// common, unwrapped case does not pay for its escaping target (inlined, the
// target would be allocated on every rejection).
//
//go:noinline
func asRejection(err error) (*shed.Rejection, bool) {
	var rej *shed.Rejection
	ok := errors.As(err, &rej)
	return rej, ok
}

// responseWriter sees the status the handler answers with, for the
// outcome, and passes everything else through.
type responseWriter struct {
	w        http.ResponseWriter
	status   int
	hijacked bool
}

// Header returns the header map of the server's ResponseWriter.
func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader records the status and passes it on. Informational (1xx)
// statuses other than 101 may precede the final one.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		rw.status = code
	}
	rw.w.WriteHeader(code)
}

// Write records an implicit 200 and passes the bytes on.
func (rw *responseWriter) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return rw.w.Write(b)
}

// WriteString keeps the server's allocation-free io.WriteString path.
func (rw *responseWriter) WriteString(s string) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return io.WriteString(rw.w, s)
}

// ReadFrom keeps io.Copy's fast path (sendfile) through the wrapper.
func (rw *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rf, ok := rw.w.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{rw.w}, src)
}

// writerOnly hides ReadFrom from io.Copy, which would otherwise call back
// into it.
type writerOnly struct{ io.Writer }

// Flush sends what is buffered to the client, when the server's writer can.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError is Flush reporting failure; http.ResponseController prefers it.
func (rw *responseWriter) FlushError() error {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack hands the connection over to the handler, when the server's writer
// can (HTTP/1.x).
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.hijacked = true
	}
	return c, brw, err
}

// Unwrap returns the server's ResponseWriter, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }
