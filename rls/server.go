package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

// Defaults of Config's bounds on a request.
const (
	DefaultMaxDescriptors = 256
	DefaultMaxEntries     = 32
	DefaultMaxEntryBytes  = 1024
	// DefaultRedisPrefix starts the service's Redis keys.
	DefaultRedisPrefix = "loadshed:rls:"
	// UnknownDomain is the domain label of requests naming a domain the
	// rules do not hold, so that clients cannot grow the label set.
	UnknownDomain = "_unknown"
)

// unknownLayer is the events' layer for a domain the rules lack.
const unknownLayer = "rls:" + UnknownDomain

// Config configures a Server. Only Domains is needed.
type Config struct {
	// Domains are the rules served first; Server.Reload replaces them.
	Domains []Domain
	// Redis, when set, holds the counts (single node, Sentinel or Cluster;
	// it must have ContextTimeoutEnabled). Unset, they are in memory.
	Redis redis.UniversalClient
	// RedisStore configures each limit's Redis store (timeout, fallback
	// share, batched mode); its Prefix (default DefaultRedisPrefix) starts
	// every key, followed by a digest of the limit's domain and path.
	RedisStore ratelimit.RedisConfig
	// MaxKeys bounds the keys a memory store holds per limit (default
	// ratelimit's).
	MaxKeys int
	// RateLimitHeaders adds the RateLimit and RateLimit-Policy fields
	// (draft-ietf-httpapi-ratelimit-headers) of the tightest limit to
	// response_headers_to_add, for the gateway to pass to the client.
	RateLimitHeaders bool
	// LegacyHeaders adds envoyproxy/ratelimit's x-ratelimit-limit,
	// x-ratelimit-remaining and x-ratelimit-reset instead.
	LegacyHeaders bool
	// MaxDescriptors, MaxEntries and MaxEntryBytes bound one request: its
	// descriptors, the entries of one descriptor, and the bytes of one key
	// or value (defaults DefaultMaxDescriptors, DefaultMaxEntries,
	// DefaultMaxEntryBytes). A request past them is INVALID_ARGUMENT.
	MaxDescriptors, MaxEntries, MaxEntryBytes int
	// Observer receives one event per limit decided (Layer "rls:<domain>",
	// Policy the limit's name or path): Admitted, Rejected, or WouldReject
	// for a limit in shadow mode. No Released follows: the service holds
	// no lease.
	Observer shed.Observer
	// QuotaMode makes every descriptor a quota (as quota_mode makes one
	// rule): a request is over only when all its descriptors are.
	QuotaMode bool
	// ResponseDynamicMetadata puts into each response's dynamic_metadata
	// the request's domain, descriptors and hits_addend, and the metadata
	// of the rules it passed, as envoyproxy/ratelimit does with
	// RESPONSE_DYNAMIC_METADATA.
	ResponseDynamicMetadata bool
	// OnResponse, when set, is told each response's domain (UnknownDomain
	// for one the rules lack) and overall code.
	OnResponse func(domain string, code pb.RateLimitResponse_Code)
	// Clock is the memory stores' clock (default the system's).
	Clock shed.Clock
	// Logger logs reloads (default slog.Default()).
	Logger *slog.Logger
	// Limits bound what reading a file costs ReloadFrom and Watch (zero
	// fields: config's defaults); LoadLimited reads the first rules within
	// the same.
	Limits config.Limits
}

// Server answers envoy.service.ratelimit.v3.RateLimitService from loadshed's
// rate limit stores: register it on a grpc.Server with
// pb.RegisterRateLimitServiceServer, serve Handler for JSON, health and
// nothing else. It is safe for concurrent use, and Reload swaps its rules
// without stopping it.
type Server struct {
	pb.UnimplementedRateLimitServiceServer

	cfg    Config
	mu     sync.Mutex // serialises Reload and Close
	table  atomic.Pointer[table]
	closed bool
	rules  []Domain // what table was compiled from, for Watch to skip a file that did not change

	applied, refused atomic.Int64
	last             lastReload // ReloadFrom's last result, for LastReload

	overrides  sync.Map // overrideKey → *node
	nOverrides atomic.Int32
}

// maxParallel bounds the goroutines one request decides its descriptors on.
const maxParallel = 8

// MaxOverrides bounds the distinct limits requests may bring in their
// descriptors' limit field; past it, further ones are ignored and the
// rules apply.
const MaxOverrides = 64

type overrideKey struct {
	rpu  uint32
	unit pb.RateLimitResponse_RateLimit_Unit
}

// override returns the rule of a limit a request brings: a fixed window of
// requests_per_unit per unit, as envoyproxy/ratelimit applies it; nil when
// it is invalid or past MaxOverrides.
func (s *Server) override(o *rlpb.RateLimitDescriptor_RateLimitOverride) *node {
	k := overrideKey{o.RequestsPerUnit, pb.RateLimitResponse_RateLimit_Unit(o.Unit)}
	if n, ok := s.overrides.Load(k); ok {
		return n.(*node)
	}
	period, ok := unitPeriods[k.unit]
	if !ok {
		return nil
	}
	if s.nOverrides.Add(1) > MaxOverrides {
		s.nOverrides.Add(-1)
		return nil
	}
	l := Limit{RequestsPerUnit: k.rpu, Unit: k.unit, Period: period, Algorithm: ratelimit.FixedWindow}
	lr := &limitRule{policy: "override", period: period, current: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: k.rpu, Unit: k.unit}}
	if k.rpu > 0 {
		st, err := s.newStore("", fmt.Sprintf("override|%d|%v", k.rpu, k.unit), &l)
		if err != nil {
			s.nOverrides.Add(-1)
			return nil
		}
		lr.store = st
	}
	n, loaded := s.overrides.LoadOrStore(k, &node{limits: []*limitRule{lr}, shared: true})
	if loaded {
		s.nOverrides.Add(-1)
		if c, ok := lr.store.(interface{ Close() error }); ok {
			c.Close()
		}
	}
	return n.(*node)
}

// New compiles cfg.Domains and returns a Server answering from them.
func New(cfg Config) (*Server, error) {
	if cfg.MaxDescriptors <= 0 {
		cfg.MaxDescriptors = DefaultMaxDescriptors
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxEntryBytes <= 0 {
		cfg.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if cfg.RedisStore.Prefix == "" {
		cfg.RedisStore.Prefix = DefaultRedisPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg}
	t, err := compile(cfg.Domains, nil, s.newStore, cfg.Clock)
	if err != nil {
		return nil, err
	}
	s.table.Store(t)
	s.rules = cfg.Domains
	return s, nil
}

func (s *Server) newStore(domain, path string, l *Limit) (ratelimit.Store, error) {
	if s.cfg.Redis != nil {
		rc := s.cfg.RedisStore
		rc.Prefix = redisPrefix(rc.Prefix, domain, path)
		return ratelimit.NewRedis(s.cfg.Redis, l.Algorithm, l.limit(), rc)
	}
	return ratelimit.NewMemory(l.Algorithm, l.limit(), ratelimit.MemoryConfig{MaxKeys: s.cfg.MaxKeys, Clock: s.cfg.Clock})
}

// Reload replaces the rules. When domains do not compile, it returns the
// error and the running rules keep serving. A limit unchanged (same
// domain, descriptor path, algorithm and limit) keeps its counts.
func (s *Server) Reload(domains []Domain) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("rls: server closed")
	}
	old := s.table.Load()
	t, err := compile(domains, old, s.newStore, s.cfg.Clock)
	if err != nil {
		return err
	}
	s.table.Store(t)
	s.rules = domains
	old.close(t)
	s.cfg.Logger.Info("rls: rules reloaded", "domains", len(t.domains))
	return nil
}

// Close closes the stores (not the Redis client, which the caller owns).
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.table.Load().close(nil)
		s.overrides.Range(func(_, n any) bool {
			if c, ok := n.(*node).limits[0].store.(interface{ Close() error }); ok {
				c.Close()
			}
			return true
		})
	}
	return nil
}

// Domains lists the domains served.
func (s *Server) Domains() []string {
	t := s.table.Load()
	out := make([]string, 0, len(t.domains))
	for d := range t.domains {
		out = append(out, d)
	}
	return out
}

// checked is one limit's decision.
type checked struct {
	rule    *limitRule
	res     ratelimit.Result
	over    bool
	soft    bool // admitted by the soft overage
	fb      bool
	policy  string
	skipped bool // replaced
}

// ShouldRateLimit decides a request as envoyproxy/ratelimit does: each
// descriptor is matched against the domain's tree and counted by the
// limits of its rule, hits_addend units at a time (0 checks without
// counting); the overall code is OVER_LIMIT when any descriptor is. An
// unknown domain, or a descriptor no rule matches, is OK. A malformed
// request is INVALID_ARGUMENT. Redis trouble is never an error: the
// stores decide from their local share.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		return nil, err
	}
	t := s.table.Load()
	root := t.domains[req.Domain]
	domainLabel, layer := req.Domain, unknownLayer
	if root == nil {
		domainLabel = UnknownDomain
	} else {
		layer = root.layer
	}
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}

	// Arrays for the common request, so that it allocates neither.
	var smallN [inlineDescriptors]*node
	var smallD [inlineDescriptors]decided
	nodes, ds := smallN[:0], smallD[:0]
	if len(req.Descriptors) > inlineDescriptors {
		nodes, ds = make([]*node, 0, len(req.Descriptors)), make([]decided, 0, len(req.Descriptors))
	}
	nodes, ds = nodes[:len(req.Descriptors)], ds[:len(req.Descriptors)]

	// Match first: replaces spans the whole request.
	var replaced map[string]bool
	if root != nil {
		replaced = s.match(root, req, nodes)
	}
	s.decideAll(ctx, req, nodes, replaced, layer, resp.Statuses, ds)

	resp.OverallCode = s.overall(nodes, resp.Statuses, ds)
	if s.cfg.ResponseDynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, nodes, resp.Statuses, ds)
	}
	if s.cfg.RateLimitHeaders || s.cfg.LegacyHeaders {
		if i := tightest(resp.Statuses, ds); i >= 0 {
			resp.ResponseHeadersToAdd = s.headers(resp.Statuses[i], ds[i].policy, ds[i].period)
		}
	}
	if s.cfg.OnResponse != nil {
		s.cfg.OnResponse(domainLabel, resp.OverallCode)
	}
	return resp, nil
}

// inlineDescriptors is how many descriptors a request may have and be
// decided without allocating its working arrays.
const inlineDescriptors = 8

// match fills nodes with each descriptor's rule (its own limit, when it
// brings one), and returns the names of the limits any of them replaces.
func (s *Server) match(root *node, req *pb.RateLimitRequest, nodes []*node) (replaced map[string]bool) {
	for i, d := range req.Descriptors {
		nodes[i] = root.match(d.Entries)
		if o := d.GetLimit(); o != nil {
			if n := s.override(o); n != nil {
				nodes[i] = n
			}
		}
		if n := nodes[i]; n != nil {
			for _, l := range n.limits {
				for _, r := range l.replaces {
					if replaced == nil {
						replaced = map[string]bool{}
					}
					replaced[r] = true
				}
			}
		}
	}
	return replaced
}

// decideAll fills statuses and ds: OK for a descriptor without a rule or
// with an unlimited one, else its limits' decision. On Redis, several
// counted descriptors are decided in parallel, so that a request costs
// about one round trip, as envoyproxy/ratelimit's pipeline does.
func (s *Server) decideAll(ctx context.Context, req *pb.RateLimitRequest, nodes []*node, replaced map[string]bool, layer string, statuses []*pb.RateLimitResponse_DescriptorStatus, ds []decided) {
	counted := 0
	for i, n := range nodes {
		switch {
		case n == nil:
			statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		case n.unlimited && len(n.limits) == 0:
			statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		default:
			counted++
		}
	}
	if s.cfg.Redis != nil && counted > 1 && !ruleRepeated(nodes) {
		// Copies, so that the goroutines never hold the caller's arrays.
		copy(ds, s.decideParallel(ctx, req, slices.Clone(nodes), replaced, layer, statuses, counted))
		return
	}
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i], ds[i] = s.decide(ctx, req, req.Descriptors[i], n, replaced, layer)
		}
	}
}

// tightest is the index of the status the headers report: an enforced
// limit's, over the limit first, else the one with the least remaining;
// -1 when no status has a limit.
func tightest(statuses []*pb.RateLimitResponse_DescriptorStatus, ds []decided) int {
	pick := -1
	for i, st := range statuses {
		if st.CurrentLimit == nil || ds[i].shadow {
			continue
		}
		if pick < 0 {
			pick = i
			continue
		}
		t := statuses[pick]
		if (st.Code == pb.RateLimitResponse_OVER_LIMIT && t.Code != pb.RateLimitResponse_OVER_LIMIT) ||
			(st.Code == t.Code && st.LimitRemaining < t.LimitRemaining) {
			pick = i
		}
	}
	return pick
}

// decided is what a descriptor's status came from, for the headers.
type decided struct {
	policy string
	period time.Duration
	// shadow: the status is a limit's in shadow mode, which decides and
	// records but must not reach clients (a client honouring the fields
	// would slow down to a limit nobody enforces).
	shadow bool
	// limited: a limit of the rule decided (not every one replaced).
	limited bool
}

// decideParallel decides the descriptors whose status is still nil on at
// most maxParallel goroutines.
func (s *Server) decideParallel(ctx context.Context, req *pb.RateLimitRequest, nodes []*node, replaced map[string]bool, layer string, statuses []*pb.RateLimitResponse_DescriptorStatus, counted int) []decided {
	ds := make([]decided, len(nodes))
	var next atomic.Int32
	var wg sync.WaitGroup
	for range min(counted, maxParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(nodes); i = int(next.Add(1)) - 1 {
				if statuses[i] == nil {
					statuses[i], ds[i] = s.decide(ctx, req, req.Descriptors[i], nodes[i], replaced, layer)
				}
			}
		}()
	}
	wg.Wait()
	return ds
}

// hits is a descriptor's hits_addend: its own when set (0 checks), else
// the request's, at least 1.
func hits(req *pb.RateLimitRequest, d *rlpb.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(1, uint64(req.HitsAddend))
}

// decide runs a descriptor's limits: every one must admit; when one does
// not, the units the others took are given back. The status is the
// rejecting limit's, else the one with the least remaining.
func (s *Server) decide(ctx context.Context, req *pb.RateLimitRequest, d *rlpb.RateLimitDescriptor, n *node, replaced map[string]bool, layer string) (*pb.RateLimitResponse_DescriptorStatus, decided) {
	shared := ""
	if n.shared {
		shared = req.Domain
	}
	key := descriptorKey(shared, d.Entries, n)
	h := hits(req, d)
	cost := int64(min(h, math.MaxInt64))
	var buf [inlineLimits]checked
	cs := buf[:0]
	var over *checked
	for _, l := range n.limits {
		if l.name != "" && replaced[l.name] {
			cs = append(cs, checked{rule: l, policy: l.policy, skipped: true})
			continue
		}
		cs = append(cs, s.check(ctx, l, n, d, key, h, cost))
		// A limit in shadow mode that is over is recorded (observe) but
		// stops nothing: the enforced limits after it still count, and
		// those before it keep what they took.
		if c := &cs[len(cs)-1]; c.over && !l.shadow {
			over = c
			break
		}
	}
	if over != nil && h > 0 && !d.IsNegativeHits {
		refund(ctx, cs[:len(cs)-1], key, cost)
	}
	pick := over
	if pick == nil {
		pick = leastRemaining(cs)
	}
	for i := range cs {
		s.observe(layer, &cs[i])
		if !d.IsNegativeHits {
			cs[i].rule.counts.count(&cs[i], h)
		}
	}
	if pick == nil { // every limit replaced
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}, decided{}
	}
	return pick.status(), decided{policy: pick.policy, period: pick.rule.period, shadow: pick.rule.shadow, limited: true}
}

// inlineLimits is how many limits a rule may have and be decided without
// allocating.
const inlineLimits = 4

// check runs one limit l of rule n for descriptor d, counted under key:
// h units (cost, as a store takes it) taken, given back
// (is_negative_hits), or only looked at (h 0).
func (s *Server) check(ctx context.Context, l *limitRule, n *node, d *rlpb.RateLimitDescriptor, key string, h uint64, cost int64) checked {
	c := checked{rule: l, policy: l.policy}
	switch {
	case l.detailed != nil:
		c.policy = l.detailed.name(l.policy, n.detailedValues(d.Entries))
	case l.valued != nil:
		name := n.metricName(d.Entries)
		c.policy = l.valued.intern(l.policy, name, name)
	}
	switch {
	case l.store == nil: // requests_per_unit 0
		c.over = true
		c.res = ratelimit.Result{ResetAfter: l.period}
	case d.IsNegativeHits:
		if h > 0 {
			_ = l.store.Refund(ctx, key, cost)
		}
		c.res, c.fb = s.peek(ctx, l.store, key)
	case h == 0:
		c.res, c.fb = s.peek(ctx, l.store, key)
		c.over = c.res.Remaining < 1
	default:
		var err error
		c.res, c.fb, err = allow(ctx, l.store, key, cost)
		if err != nil {
			// A cost above what the limit ever admits, or a bad key:
			// over, as envoyproxy/ratelimit answers a hits_addend past
			// the limit, with the window's own reset and what remains.
			c.res, c.fb = s.peek(ctx, l.store, key)
			if c.res.ResetAfter <= 0 {
				c.res.ResetAfter = l.period
			}
		}
		c.over = err != nil || !c.res.Allowed
		if err == nil && c.over && l.soft != nil {
			if _, ok := l.soft.admit(key, cost); ok {
				c.over, c.soft = false, true
			}
		}
	}
	return c
}

// refund gives back the units the limits of cs took under key: from the
// overage for one a soft limit admitted, else from the limit's store.
func refund(ctx context.Context, cs []checked, key string, cost int64) {
	for i := range cs {
		switch c := &cs[i]; {
		case c.soft:
			_ = c.rule.soft.overage.Refund(ctx, key, cost)
		case !c.skipped && c.rule.store != nil:
			_ = c.rule.store.Refund(ctx, key, cost)
		}
	}
}

// leastRemaining is the limit of cs a status reports when none rejected:
// an enforced limit's before a shadow one's, then the least remaining;
// nil when every limit was replaced.
func leastRemaining(cs []checked) *checked {
	var pick *checked
	for i := range cs {
		if c := &cs[i]; !c.skipped && (pick == nil || (pick.rule.shadow && !c.rule.shadow) ||
			(pick.rule.shadow == c.rule.shadow && c.res.Remaining < pick.res.Remaining)) {
			pick = c
		}
	}
	return pick
}

// status is the descriptor's status reporting c: OVER_LIMIT when c is an
// enforced limit that is over.
func (c *checked) status() *pb.RateLimitResponse_DescriptorStatus {
	code := pb.RateLimitResponse_OK
	if c.over && !c.rule.shadow {
		code = pb.RateLimitResponse_OVER_LIMIT
	}
	return &pb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       c.rule.current,
		LimitRemaining:     uint32(min(max(c.res.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: durationpb.New(resetDuration(c.res.ResetAfter, c.rule.period)),
	}
}

// allow takes cost units, reporting whether the store's local fallback
// decided.
func allow(ctx context.Context, st ratelimit.Store, key string, cost int64) (ratelimit.Result, bool, error) {
	if fd, ok := st.(ratelimit.FallbackDecider); ok {
		return fd.Decide(ctx, key, cost)
	}
	r, err := st.Allow(ctx, key, cost)
	return r, false, err
}

// peek reads a limit without counting (ratelimit.Peek: on Redis, one round
// trip that writes nothing). Remaining is what is left.
func (s *Server) peek(ctx context.Context, st ratelimit.Store, key string) (ratelimit.Result, bool) {
	r, fb, err := ratelimit.Peek(ctx, st, key)
	if err != nil {
		return ratelimit.Result{Limit: st.Limit().Quantity}, fb
	}
	r.Allowed = true
	r.RetryAfter = 0
	return r, fb
}

// resetDuration is duration_until_reset: whole seconds, rounded up, for a
// period of whole seconds (as envoyproxy/ratelimit reports it, and never
// early); exact otherwise.
func resetDuration(d, period time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if period%time.Second == 0 {
		return (d + time.Second - 1) / time.Second * time.Second
	}
	return d
}

func (s *Server) observe(layer string, c *checked) {
	if s.cfg.Observer == nil || c.skipped {
		return
	}
	e := shed.Event{Layer: layer, Kind: shed.Admitted, Policy: c.policy, Fallback: c.fb, Over: c.soft}
	if c.over {
		if c.rule.shadow {
			e.Kind = shed.WouldReject
		} else {
			e.Kind, e.Status = shed.Rejected, shed.StatusTooManyRequests
		}
	}
	s.cfg.Observer.Observe(e)
}

// descriptorKey is the key a descriptor is counted under within one
// limit: every entry's key and value (a shared pattern in place of the
// value where the rule n shares one; after the domain, for a limit all
// domains share), length-prefixed so that no two descriptors share one.
func descriptorKey(domain string, es []*rlpb.RateLimitDescriptor_Entry, n *node) string {
	size := len(domain) + 1
	for i, e := range es {
		size += len(e.Key) + len(n.countedValue(i, e)) + 8
	}
	b := make([]byte, 0, size)
	if domain != "" {
		b = append(b, domain...)
		b = append(b, 0)
	}
	for i, e := range es {
		v := n.countedValue(i, e)
		b = strconv.AppendInt(b, int64(len(e.Key)), 10)
		b = append(b, ':')
		b = append(b, e.Key...)
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return string(b)
}

func detailedValues(es []*rlpb.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	return b.String()
}

// validate refuses what envoyproxy/ratelimit refuses (an empty domain, no
// descriptors) and what would cost without bound.
func (s *Server) validate(req *pb.RateLimitRequest) error {
	switch {
	case req == nil:
		return status.Error(codes.InvalidArgument, "rls: no request")
	case req.Domain == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(req.Descriptors) == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(req.Descriptors) > s.cfg.MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors, at most %d", len(req.Descriptors), s.cfg.MaxDescriptors)
	case len(req.Domain) > s.cfg.MaxEntryBytes || !utf8.ValidString(req.Domain):
		return status.Error(codes.InvalidArgument, "domain: too long or not UTF-8")
	}
	for i, d := range req.Descriptors {
		if d == nil {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d] is null", i)
		}
		if len(d.Entries) > s.cfg.MaxEntries {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d]: %d entries, at most %d", i, len(d.Entries), s.cfg.MaxEntries)
		}
		for j, e := range d.Entries {
			if e == nil {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d] is null", i, j)
			}
			if len(e.Key) > s.cfg.MaxEntryBytes || len(e.Value) > s.cfg.MaxEntryBytes {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d]: key or value longer than %d bytes", i, j, s.cfg.MaxEntryBytes)
			}
			if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d]: key or value is not UTF-8", i, j)
			}
		}
	}
	return nil
}

// headers are the tightest limit's fields for the client.
func (s *Server) headers(st *pb.RateLimitResponse_DescriptorStatus, policy string, period time.Duration) []*corepb.HeaderValue {
	reset := st.DurationUntilReset.AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	q := uint64(st.CurrentLimit.RequestsPerUnit)
	var out []*corepb.HeaderValue
	if s.cfg.RateLimitHeaders {
		name := strconv.Quote(policy)
		out = append(out,
			&corepb.HeaderValue{Key: "RateLimit-Policy", Value: fmt.Sprintf("%s;q=%d;w=%d", name, q, int64((period+time.Second-1)/time.Second))},
			&corepb.HeaderValue{Key: "RateLimit", Value: fmt.Sprintf("%s;r=%d;t=%d", name, st.LimitRemaining, secs)})
	}
	if s.cfg.LegacyHeaders {
		out = append(out,
			&corepb.HeaderValue{Key: "x-ratelimit-limit", Value: strconv.FormatUint(q, 10)},
			&corepb.HeaderValue{Key: "x-ratelimit-remaining", Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			&corepb.HeaderValue{Key: "x-ratelimit-reset", Value: strconv.FormatInt(secs, 10)})
	}
	return out
}
