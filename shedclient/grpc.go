package shedclient

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
)

// The trailing metadata a loadshed server (package shedgrpc) rejects with.
const (
	pushbackKey  = "grpc-retry-pushback-ms"
	rateLimitKey = "ratelimit"
	policyKey    = "ratelimit-policy"
)

// UnaryInterceptor returns a gRPC client interceptor that sends unary
// calls as the package describes: install it with
// grpc.WithChainUnaryInterceptor. The destination is the connection's
// target, the scope of a quota the method. Calls it does not send fail
// with a *QuotaError (RESOURCE_EXHAUSTED to status.Code) or a
// *ThrottleError (UNAVAILABLE). Only methods Config.Idempotent names are
// retried, unless Config.RetryNonIdempotent.
func (c *Client) UnaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		prio, hasPrio := shed.PriorityFrom(ctx)
		if !prio.Valid() {
			prio, hasPrio = shed.Default, false
		}
		ctx = c.outgoingGRPC(ctx, hasPrio, prio)
		var err error
		cl := call{
			dest: c.dest(cc.Target()), scope: method, priority: prio, replayable: true,
			idempotent: c.cfg.Idempotent != nil && c.cfg.Idempotent(method),
		}
		cl.send = func(ctx context.Context, _ int) answer {
			var header, trailer metadata.MD
			err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Header(&header), grpc.Trailer(&trailer))...)
			return answerOfGRPC(err, header, trailer)
		}
		if e := c.run(ctx, cl); e != nil {
			return e
		}
		return err
	}
}

// StreamInterceptor returns a gRPC client interceptor that propagates the
// context's priority on streams and holds back the streams of a spent
// quota or a throttled destination. A stream's first message (or its
// rejection, which arrives there) tells whether the server took it.
// Streams are never retried.
func (c *Client) StreamInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		prio, hasPrio := shed.PriorityFrom(ctx)
		if !prio.Valid() {
			prio, hasPrio = shed.Default, false
		}
		ctx = c.outgoingGRPC(ctx, hasPrio, prio)
		var cs grpc.ClientStream
		var err error
		d := c.dest(cc.Target())
		cl := call{dest: d, scope: method, priority: prio}
		cl.send = func(ctx context.Context, _ int) answer {
			cs, err = streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return answerOfGRPC(err, nil, nil)
			}
			return answer{pending: true}
		}
		if e := c.run(ctx, cl); e != nil {
			return nil, e
		}
		if err != nil {
			return nil, err
		}
		return &watchedStream{ClientStream: cs, c: c, d: d, scope: method, prio: prio}, nil
	}
}

// watchedStream learns from a stream's first answer what a unary call's
// end teaches: whether the server took it, and its RateLimit fields.
type watchedStream struct {
	grpc.ClientStream
	c     *Client
	d     *dest
	scope string
	prio  shed.Priority
	once  sync.Once
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		var a answer
		switch {
		case err == nil:
			h, _ := s.ClientStream.Header()
			a = answerOfGRPC(nil, h, nil)
		case err == io.EOF:
		default:
			a = answerOfGRPC(err, nil, s.ClientStream.Trailer())
		}
		now := s.c.clock.Now()
		if a.timedOut || !a.transportErr {
			s.d.count(s.prio, now, !a.rejected && !a.timedOut)
		}
		s.c.learn(s.d, s.scope, &a, now)
	})
	return err
}

// outgoingGRPC adds the propagated priority (and token) to the outgoing
// metadata; gRPC carries the deadline itself.
func (c *Client) outgoingGRPC(ctx context.Context, hasPrio bool, prio shed.Priority) context.Context {
	if c.cfg.NoPropagation || !hasPrio {
		return ctx
	}
	if c.cfg.Token != "" {
		return metadata.AppendToOutgoingContext(ctx, propagation.PriorityMetadata, prio.String(), propagation.TokenMetadata, c.cfg.Token)
	}
	return metadata.AppendToOutgoingContext(ctx, propagation.PriorityMetadata, prio.String())
}

// answerOfGRPC reads a call's end: the RateLimit fields of an admitted
// call's header, or of a rejection's trailer. RESOURCE_EXHAUSTED is a rejection of
// the client's quota; UNAVAILABLE is a load-shedding rejection when the
// server said so (a pushback or RateLimit fields), else a transport
// failure, which throttling does not count.
func answerOfGRPC(err error, header, trailer metadata.MD) answer {
	var a answer
	if err == nil {
		if v := header.Get(rateLimitKey); len(v) > 0 {
			a.limits = parseLimits(v, nil)
		}
		if v := header.Get(policyKey); len(v) > 0 {
			a.policies = parseLimits(v, nil)
		}
		return a
	}
	if v := trailer.Get(pushbackKey); len(v) > 0 {
		a.retryAfter, a.hasRetry = parsePushback(v[0])
		a.noRetry = !a.hasRetry // gRFC A6: a malformed or negative pushback says do not retry
	}
	if v := trailer.Get(rateLimitKey); len(v) > 0 {
		a.limits = parseLimits(v, nil)
	}
	if v := trailer.Get(policyKey); len(v) > 0 {
		a.policies = parseLimits(v, nil)
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		a.rejected, a.quota = true, true
	case codes.Unavailable:
		if len(trailer.Get(pushbackKey)) > 0 || len(a.limits) > 0 {
			a.rejected = true
		} else {
			a.transportErr = true
		}
	case codes.DeadlineExceeded:
		a.transportErr, a.timedOut = true, true
	case codes.Canceled:
		a.transportErr = true
	}
	return a
}

// GRPCStatus makes status.Code of a *QuotaError RESOURCE_EXHAUSTED.
func (e *QuotaError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// GRPCStatus makes status.Code of a *ThrottleError UNAVAILABLE.
func (e *ThrottleError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}
