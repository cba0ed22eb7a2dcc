// Package shedgrpc runs every gRPC call through a shed.Chain: unary and
// stream server interceptors, the gRPC counterpart of shedhttp.
//
//	s := grpc.NewServer(shedgrpc.MustServerOptions(chain, shedgrpc.Config{})...)
//
// For each call it resolves who is asking (Key; the peer's address, read
// from the proxies' metadata only through trusted proxies, by default), the
// route (the full method name, "/payments.v1.Charges/Create"), its
// priority (Priorities, a propagated one from a trusted caller, then
// Config.Priority), the cost and the deadline (the call's); runs the chain;
// and answers a rejection with RESOURCE_EXHAUSTED (the client went over its
// own limit) or UNAVAILABLE (the service sheds load), with the retry delay
// as grpc-retry-pushback-ms (which gRPC's own retry policy honours) and the
// RateLimit / RateLimit-Policy fields in trailing metadata. A stream holds
// its leases for its whole life. Health checks and reflection are never
// shed.
package shedgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/internal/clientip"
	"github.com/loadshed/loadshed/internal/grpcmethod"
	"github.com/loadshed/loadshed/internal/propagated"
	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

// Metadata keys: the RateLimit fields travel in the header of an admitted
// call and in the trailer of a rejection, with the retry delay.
const (
	// RetryPushbackKey is gRPC's retry pushback (gRFC A6): milliseconds
	// until a retry may succeed.
	RetryPushbackKey = "grpc-retry-pushback-ms"
	// RateLimitPolicyKey and RateLimitKey carry the RateLimit-Policy and
	// RateLimit fields of draft-ietf-httpapi-ratelimit-headers, spelled as
	// the HTTP middleware spells them.
	RateLimitPolicyKey = "ratelimit-policy"
	RateLimitKey       = "ratelimit"
	// RetryAfterKey carries the delay in whole seconds, as Retry-After.
	RetryAfterKey = "retry-after"
)

// KeyFunc says who is calling: the Request.Key of a call to method. It
// returns ok false when the call carries nothing to key on; the peer's
// address is then used.
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)

// MaxKeyLength bounds a key in bytes; a longer one counts as none.
const MaxKeyLength = 1024

// KeyMetadata keys calls on the value of the metadata name (an API key):
// "h:" + the lower-cased name + ":" + the value, as shedhttp.KeyHeader
// spells it, so a service reached over both protocols keeps one quota per
// caller.
func KeyMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	prefix := "h:" + name + ":"
	return func(ctx context.Context, _ string) (string, bool) {
		v := metadata.ValueFromIncomingContext(ctx, name)
		if len(v) == 0 {
			return "", false
		}
		s := strings.TrimSpace(v[0])
		if s == "" || len(s) > shedKeyPart {
			return "", false
		}
		return prefix + s, true
	}
}

// shedKeyPart is shedhttp.MaxKeyPart, without importing it.
const shedKeyPart = 256

// ClientIPConfig says whom to believe about the caller's address, with the
// rules of shedhttp.ClientIPConfig: the peer is the caller unless it is one
// of TrustedProxies, in which case the Header metadata they write
// (x-forwarded-for by default, or forwarded) is walked from the right.
type ClientIPConfig struct {
	TrustedProxies []string
	Header         string
	IPv6PrefixBits int
}

// Config configures the interceptors. The zero value keys calls on the
// peer's address, gives every method Default priority and cost 1.
type Config struct {
	// Key says who is calling (default: the caller's address, see
	// ClientIP). Calls it finds no key for are keyed on the address.
	Key KeyFunc
	// ClientIP says which proxies to believe about the caller's address.
	ClientIP ClientIPConfig
	// Priorities annotates methods with priorities (see MethodPriorities).
	Priorities MethodPriorities
	// DefaultPriority is the priority of methods Priorities does not cover
	// (default Default).
	DefaultPriority shed.Priority
	// Propagation, when set, believes the priority a trusted caller
	// propagated (loadshed-priority metadata) over the method's, and puts
	// every admitted call's priority in the handler's context
	// (shed.WithPriority), so that the calls it makes carry it on.
	Propagation *propagation.Config
	// Priority, when set, has the last word on a call's priority, as in
	// shedhttp: shed.Unset or an invalid result keeps the given one.
	Priority func(ctx context.Context, method string, p shed.Priority) shed.Priority
	// Cost is how many units a call takes (default 1).
	Cost func(ctx context.Context, method string) int64
	// Skip, when set and true for a method, runs it without the chain.
	// Health checks and reflection are always skipped.
	Skip func(method string) bool
	// DiscloseCapacity adds the service's own capacity limits to the
	// RateLimit fields of rejections, as in shedhttp.
	DiscloseCapacity bool
}

// Interceptors runs calls through a chain. Build it with New.
type Interceptors struct {
	chain     *shed.Chain
	key       KeyFunc
	ip        *clientip.Resolver
	ipHeader  string // ip's header as a metadata key
	methods   grpcmethod.Table
	trust     *propagated.Trust
	priority  func(context.Context, string, shed.Priority) shed.Priority
	cost      func(context.Context, string) int64
	skip      func(string) bool
	disclose  bool
	grants    sync.Pool
	forwardTo bool // put the resolved priority in the handler's context
}

// New checks cfg and returns interceptors running calls through chain.
// An invalid config is an error naming the field.
func New(chain *shed.Chain, cfg Config) (*Interceptors, error) {
	if chain == nil {
		return nil, errors.New("shedgrpc: New called with a nil *shed.Chain")
	}
	var errs []error
	ip, err := clientip.New(clientip.Config(cfg.ClientIP), "shedgrpc", "Config.ClientIP")
	if err != nil {
		errs = append(errs, err)
	}
	table, err := compileMethods(cfg.Priorities, cfg.DefaultPriority)
	if err != nil {
		errs = append(errs, err)
	}
	var trust *propagated.Trust
	if cfg.Propagation != nil {
		if trust, err = propagated.NewTrust(*cfg.Propagation, "shedgrpc", "Config.Propagation"); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	in := &Interceptors{chain: chain, key: cfg.Key, ip: ip, ipHeader: strings.ToLower(ip.Header()),
		methods: table, trust: trust, priority: cfg.Priority, cost: cfg.Cost, skip: cfg.Skip,
		disclose: cfg.DiscloseCapacity, forwardTo: trust != nil}
	in.grants.New = func() any { return new(shed.Grant) }
	return in, nil
}

// ServerOptions returns the options that install both interceptors:
// grpc.NewServer(opts...). They chain after interceptors installed
// before them.
func ServerOptions(chain *shed.Chain, cfg Config) ([]grpc.ServerOption, error) {
	in, err := New(chain, cfg)
	if err != nil {
		return nil, err
	}
	return in.ServerOptions(), nil
}

// MustServerOptions is ServerOptions for a config known to be valid, such
// as a literal in main: it panics on an invalid one.
func MustServerOptions(chain *shed.Chain, cfg Config) []grpc.ServerOption {
	opts, err := ServerOptions(chain, cfg)
	if err != nil {
		panic(err)
	}
	return opts
}

// ServerOptions returns the options that install in's interceptors.
func (in *Interceptors) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream())}
}

// IgnoredPriorities returns how many propagated priorities were ignored
// because their callers were not trusted.
func (in *Interceptors) IgnoredPriorities() int64 { return in.trust.Ignored() }

// neverShed reports whether method is a health check or reflection call,
// which must answer however loaded the server is.
func neverShed(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.ServerReflection/")
}

// Unary returns the unary server interceptor.
func (in *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if neverShed(info.FullMethod) || (in.skip != nil && in.skip(info.FullMethod)) {
			return handler(ctx, req)
		}
		g, ctx, err := in.acquire(ctx, info.FullMethod,
			func(md metadata.MD) { _ = grpc.SetHeader(ctx, md) },
			func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
		if err != nil {
			return nil, err
		}
		defer in.release(ctx, g, &err)
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor. The stream holds its
// leases until the handler returns.
func (in *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		if neverShed(info.FullMethod) || (in.skip != nil && in.skip(info.FullMethod)) {
			return handler(srv, ss)
		}
		g, ctx, err := in.acquire(ss.Context(), info.FullMethod, func(md metadata.MD) { _ = ss.SetHeader(md) }, ss.SetTrailer)
		if err != nil {
			return err
		}
		defer in.release(ctx, g, &err)
		if ctx != ss.Context() {
			ss = &stream{ServerStream: ss, ctx: ctx}
		}
		return handler(srv, ss)
	}
}

// stream gives the handler the context carrying the call's priority.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// acquire runs the chain for a call to method. On a rejection it sets the
// trailer through setTrailer and returns the status error to answer with.
func (in *Interceptors) acquire(ctx context.Context, method string, setHeader, setTrailer func(metadata.MD)) (*shed.Grant, context.Context, error) {
	req := in.request(ctx, method)
	g := in.grants.Get().(*shed.Grant)
	if err := in.chain.Acquire(ctx, req, g); err != nil {
		in.put(g)
		return nil, ctx, in.rejected(ctx, err, setTrailer)
	}
	if md := in.admittedHeader(g.Leases()); md != nil {
		setHeader(md)
	}
	if in.forwardTo {
		ctx = shed.WithPriority(ctx, g.Request().Priority)
	}
	return g, ctx, nil
}

// admittedHeader returns the header metadata of an admitted call: the
// RateLimit-Policy and RateLimit fields of its leases' quotas, as an
// admitted HTTP response carries them, so that a client learns a quota
// is spent (r=0) before it is rejected; nil when no quota is shown.
func (in *Interceptors) admittedHeader(leases []shed.Lease) metadata.MD {
	var policy, limit []byte
	for i := range leases {
		l := &leases[i]
		if !l.MoreQuotas {
			if ratefield.Shown(&l.Quota, in.disclose) {
				policy, limit = ratefield.AppendQuota(policy, limit, &l.Quota, l.Over)
			}
			continue
		}
		for _, q := range l.Quotas(nil) {
			if ratefield.Shown(&q, in.disclose) {
				policy, limit = ratefield.AppendQuota(policy, limit, &q, l.Over)
			}
		}
	}
	if len(policy) == 0 {
		return nil
	}
	return metadata.MD{RateLimitPolicyKey: {string(policy)}, RateLimitKey: {string(limit)}}
}

func (in *Interceptors) put(g *shed.Grant) {
	g.Reset()
	in.grants.Put(g)
}

// release gives the grant back with the call's outcome; a panicking
// handler releases Failed, and the panic goes on.
func (in *Interceptors) release(ctx context.Context, g *shed.Grant, err *error) {
	if p := recover(); p != nil {
		g.Release(shed.Failed)
		panic(p)
	}
	g.Release(outcomeOf(ctx, *err))
	in.put(g)
}

// outcomeOf classifies how a call ended: Dropped when the caller went away,
// Failed on the codes that say the server failed (as a 5xx does in HTTP),
// Completed otherwise, a client's own error included.
func outcomeOf(ctx context.Context, err error) shed.Outcome {
	if ctx.Err() != nil {
		return shed.Dropped
	}
	if err == nil {
		return shed.Completed
	}
	switch status.Code(err) {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unimplemented, codes.DeadlineExceeded:
		return shed.Failed
	case codes.Canceled:
		return shed.Dropped
	}
	return shed.Completed
}

// request resolves the shed Request of a call. Metadata is read one key
// at a time, and only the keys the config needs: copying the whole
// incoming metadata would cost more than the rest of the decision.
func (in *Interceptors) request(ctx context.Context, method string) shed.Request {
	req := shed.Request{Route: method, Cost: 1}
	var caller netip.Addr
	if in.key != nil {
		if k, ok := in.key(ctx, method); ok && len(k) <= MaxKeyLength {
			req.Key = k
		}
	}
	if req.Key == "" || in.trust != nil {
		caller = in.caller(ctx)
	}
	if req.Key == "" {
		req.Key = "unknown"
		if caller.IsValid() {
			req.Key = in.ip.KeyOf(caller)
		}
	}

	prio := in.methods.Resolve(method)
	if p, ok := shed.PriorityFrom(ctx); ok && p.Valid() {
		prio = p
	}
	if in.trust != nil {
		if w := first(ctx, propagation.PriorityMetadata); w != "" {
			if p, err := in.trust.Accept(w, caller, first(ctx, propagation.TokenMetadata), req.Key); err == nil && p.Valid() {
				prio = p
			}
		}
	}
	if in.priority != nil {
		if p := in.priority(ctx, method, prio); p.Valid() {
			prio = p
		}
	}
	req.Priority = prio
	if in.cost != nil {
		req.Cost = in.cost(ctx, method)
	}
	return req
}

// caller returns the caller's address: the peer's, through the trusted
// proxies; invalid when the peer has no IP address.
func (in *Interceptors) caller(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	var a netip.Addr
	switch addr := p.Addr.(type) {
	case *net.TCPAddr:
		a = addr.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(p.Addr.String())
		if err != nil {
			return netip.Addr{}
		}
		a = ap.Addr()
	}
	if !a.IsValid() {
		return a
	}
	var vals []string
	if in.ip.Trusting() {
		vals = metadata.ValueFromIncomingContext(ctx, in.ipHeader)
	}
	return in.ip.Client(a, vals)
}

// first returns the first value of the incoming metadata key.
func first(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// rejected turns a chain's error into the status to answer with, setting
// the trailer of a rejection.
func (in *Interceptors) rejected(ctx context.Context, err error, setTrailer func(metadata.MD)) error {
	var rej *shed.Rejection
	if !errors.As(err, &rej) {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Unavailable, "the service cannot take the call now")
	}
	setTrailer(Trailer(rej, in.disclose))
	code := codes.Unavailable
	if rej.Status == shed.StatusTooManyRequests {
		code = codes.ResourceExhausted
	}
	reason := rej.Reason
	if reason == "" {
		reason = "request rejected"
	}
	return status.Error(code, reason)
}

// Trailer returns the trailing metadata that tells a client about rej:
// grpc-retry-pushback-ms and retry-after when it says when to retry, and
// the RateLimit-Policy and RateLimit fields of the violated policies it may
// see (the service's own capacity only with disclose).
func Trailer(rej *shed.Rejection, disclose bool) metadata.MD {
	md := metadata.MD{}
	if rej.RetryAfter > 0 {
		md[RetryPushbackKey] = []string{strconv.FormatInt(rej.RetryAfter.Milliseconds(), 10)}
		md[RetryAfterKey] = []string{strconv.FormatInt(rej.RetryAfterSeconds(), 10)}
	}
	var policy, limit []byte
	for i := range rej.Policies {
		if q := &rej.Policies[i]; ratefield.Shown(q, disclose) {
			cut := ratefield.CutReset(*q, rej.RetryAfter)
			policy, limit = ratefield.AppendQuota(policy, limit, &cut, false)
		}
	}
	if len(policy) > 0 {
		md[RateLimitPolicyKey] = []string{string(policy)}
		md[RateLimitKey] = []string{string(limit)}
	}
	return md
}

// errMethod reports a malformed method pattern.
func errMethod(key, why string) error {
	return fmt.Errorf("shedgrpc: Config.Priorities[%q]: %s", key, why)
}
