// Package shedclientgrpc is the gRPC half of package shedclient: client
// interceptors that stop sending what a loaded service would reject, with
// what a *shedclient.Client learns of each destination. It is apart from
// shedclient so that a client speaking only HTTP does not link gRPC.
//
//	c := shedclient.New(shedclient.Config{})
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(shedclientgrpc.UnaryInterceptor(c)),
//		grpc.WithChainStreamInterceptor(shedclientgrpc.StreamInterceptor(c)))
//
// The destination is the connection's target, the scope of a quota the
// method. A server's RateLimit and RateLimit-Policy fields are read from
// the header of an admitted call and the trailer of a rejected one, and
// its grpc-retry-pushback-ms (gRFC A6) as Retry-After. Calls the client
// does not send fail with an error that errors.As reads as a
// *shedclient.QuotaError (status.Code RESOURCE_EXHAUSTED) or a
// *shedclient.ThrottleError (UNAVAILABLE).
package shedclientgrpc

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loadshed/loadshed/propagation"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedclient"
	"github.com/loadshed/loadshed/shedclient/internal/frontend"
)

// The trailing metadata a loadshed server (package shedgrpc) rejects with.
const (
	pushbackKey  = "grpc-retry-pushback-ms"
	rateLimitKey = "ratelimit"
	policyKey    = "ratelimit-policy"
)

// UnaryInterceptor returns a gRPC client interceptor that sends unary
// calls through c: install it with grpc.WithChainUnaryInterceptor. Only
// methods Config.Idempotent names are retried, unless
// Config.RetryNonIdempotent.
func UnaryInterceptor(c *shedclient.Client) grpc.UnaryClientInterceptor {
	fc := frontend.Of(c)
	o := fc.Options()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		prio, hasPrio := shed.PriorityFrom(ctx)
		if !prio.Valid() {
			prio, hasPrio = shed.Default, false
		}
		ctx = outgoing(ctx, o, hasPrio, prio)
		var err error
		call := frontend.Call{
			Dest: cc.Target(), Scope: method, Priority: prio, Replayable: true,
			Idempotent: o.Idempotent != nil && o.Idempotent(method),
			Send: func(ctx context.Context, _ int) frontend.Answer {
				var header, trailer metadata.MD
				err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Header(&header), grpc.Trailer(&trailer))...)
				return answerOf(err, header, trailer)
			},
		}
		if e := fc.Run(ctx, call); e != nil {
			return withStatus(e)
		}
		return err
	}
}

// StreamInterceptor returns a gRPC client interceptor that propagates the
// context's priority on streams and holds back the streams of a spent
// quota or a throttled destination: install it with
// grpc.WithChainStreamInterceptor. A stream's first message (or its
// rejection, which arrives there) tells whether the server took it.
// Streams are never retried.
func StreamInterceptor(c *shedclient.Client) grpc.StreamClientInterceptor {
	fc := frontend.Of(c)
	o := fc.Options()
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		prio, hasPrio := shed.PriorityFrom(ctx)
		if !prio.Valid() {
			prio, hasPrio = shed.Default, false
		}
		ctx = outgoing(ctx, o, hasPrio, prio)
		var cs grpc.ClientStream
		var err error
		call := frontend.Call{
			Dest: cc.Target(), Scope: method, Priority: prio,
			Send: func(ctx context.Context, _ int) frontend.Answer {
				cs, err = streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return answerOf(err, nil, nil)
				}
				return frontend.Answer{Pending: true}
			},
		}
		if e := fc.Run(ctx, call); e != nil {
			return nil, withStatus(e)
		}
		if err != nil {
			return nil, err
		}
		return &watchedStream{ClientStream: cs, c: fc, dest: cc.Target(), scope: method, prio: prio}, nil
	}
}

// watchedStream learns from a stream's first answer what a unary call's
// end teaches: whether the server took it, and its RateLimit fields.
type watchedStream struct {
	grpc.ClientStream
	c           frontend.Client
	dest, scope string
	prio        shed.Priority
	once        sync.Once
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		var a frontend.Answer
		switch {
		case err == nil:
			h, _ := s.ClientStream.Header()
			a = answerOf(nil, h, nil)
		case err == io.EOF:
		default:
			a = answerOf(err, nil, s.ClientStream.Trailer())
		}
		s.c.Settle(s.dest, s.scope, s.prio, a)
	})
	return err
}

// outgoing adds the propagated priority (and token) to the outgoing
// metadata; gRPC carries the deadline itself.
func outgoing(ctx context.Context, o frontend.Options, hasPrio bool, prio shed.Priority) context.Context {
	if o.NoPropagation || !hasPrio {
		return ctx
	}
	if o.Token != "" {
		return metadata.AppendToOutgoingContext(ctx, propagation.PriorityMetadata, prio.String(), propagation.TokenMetadata, o.Token)
	}
	return metadata.AppendToOutgoingContext(ctx, propagation.PriorityMetadata, prio.String())
}

// answerOf reads a call's end: the RateLimit fields of an admitted call's
// header, or of a rejection's trailer. RESOURCE_EXHAUSTED is a rejection
// of the client's quota; UNAVAILABLE is a load-shedding rejection when
// the server said so (a pushback or RateLimit fields), else a transport
// failure, which throttling does not count.
func answerOf(err error, header, trailer metadata.MD) frontend.Answer {
	var a frontend.Answer
	if err == nil {
		a.Limits, a.Policies = header.Get(rateLimitKey), header.Get(policyKey)
		return a
	}
	pushback := trailer.Get(pushbackKey)
	if len(pushback) > 0 {
		a.RetryAfter, a.HasRetry = parsePushback(pushback[0])
		a.NoRetry = !a.HasRetry // gRFC A6: a malformed or negative pushback says do not retry
	}
	a.Limits, a.Policies = trailer.Get(rateLimitKey), trailer.Get(policyKey)
	switch status.Code(err) {
	case codes.ResourceExhausted:
		a.Rejected, a.Quota = true, true
	case codes.Unavailable:
		if len(pushback) > 0 {
			a.Rejected = true
		} else {
			a.RejectedIfLimits = true
		}
	case codes.DeadlineExceeded:
		a.TransportErr, a.TimedOut = true, true
	case codes.Canceled:
		a.TransportErr = true
	}
	return a
}

// maxDuration stands for "longer than any maximum a caller configures".
const maxDuration = 1<<63 - 1

// parsePushback reads grpc-retry-pushback-ms: milliseconds, or, when
// negative or malformed, "do not retry" (gRFC A6), reported as not ok.
func parsePushback(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 18 {
		if len(v) > 18 && strings.Trim(v, "0123456789") == "" {
			return maxDuration, true
		}
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || v[0] == '+' {
		return 0, false
	}
	if n > int64(maxDuration/time.Millisecond) {
		return maxDuration, true
	}
	return time.Duration(n) * time.Millisecond, true
}

// rejection is an error of a call the client did not send, with the gRPC
// status it stands for: errors.As reads the *shedclient.QuotaError or
// *shedclient.ThrottleError it wraps, and status.Code its code.
type rejection struct {
	err  error
	code codes.Code
}

func (e *rejection) Error() string              { return e.err.Error() }
func (e *rejection) Unwrap() error              { return e.err }
func (e *rejection) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }

// withStatus gives err the gRPC status of what it is.
func withStatus(err error) error {
	var quota *shedclient.QuotaError
	var throttle *shedclient.ThrottleError
	switch {
	case errors.As(err, &quota):
		return &rejection{err, codes.ResourceExhausted}
	case errors.As(err, &throttle):
		return &rejection{err, codes.Unavailable}
	}
	return err // the caller's context ended while waiting
}
