package config

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// Options are what a program gives Build besides the file: what a file
// cannot hold (functions, clients, signals), and the hooks of a reload.
type Options struct {
	// Headroom is the signal elastic layers read. A file with a layer in
	// elastic mode is refused without one.
	Headroom shed.Headroom
	// Descriptors resolve rate-limit descriptor keys other than the
	// built-in key, route and priority: a key named here may appear in the
	// file ("tenant", read from the context the handler set).
	Descriptors map[string]func(ctx context.Context, req shed.Request) string
	// Redis, when set, is the client the Redis-backed layers use instead of
	// one built from the file's redis section. It must have
	// ContextTimeoutEnabled set. Build never closes it.
	Redis redis.UniversalClient
	// HTTP is the base of the middleware's configuration: its fields a file
	// cannot hold (Routes, Key when the file does not set key, Priority,
	// Cost, Skip, OnReject, Clock) are kept; the file's replace the rest.
	HTTP shedhttp.Config
	// Observer receives every decision of the chain (default none).
	Observer shed.Observer
	// Clock is the chain's and the layers' clock (default shed.SystemClock).
	Clock shed.Clock
	// Logger logs reloads, refused files and layers that failed to close
	// (default slog.Default()).
	Logger *slog.Logger
	// OnReload, when set, is told the result of every reload, applied or
	// refused, after it is logged.
	OnReload func(Reload)
	// Limits bound what reading the file may cost (zero fields: the
	// defaults); a file past them is refused with its position.
	Limits Limits
	// MemoryOnly builds every layer on in-memory stores, whatever the file
	// says: `loadshed try` uses it to decide without a Redis server.
	MemoryOnly bool
}

func (o *Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}
