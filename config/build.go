package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// Built is a configuration turned into working parts: the chain, and the
// middleware's configuration to serve it over HTTP. Close it when done.
type Built struct {
	// Chain runs the file's layers in order.
	Chain *shed.Chain
	// HTTP is the middleware's configuration: Options.HTTP with the file's
	// http section applied, as Middleware was built with it.
	HTTP shedhttp.Config
	// File is the configuration it was built from, defaults not filled in.
	File *File

	mw    shedhttp.Middleware
	parts []*part
}

// part is something a build made that holds state or a goroutine: a
// limiter, a layer, a Redis client. Parts whose definition did not change
// are carried from one build to the next by a reload, so their counts
// survive; each is closed when the last build using it is.
type part struct {
	key   string // the definition it was built from
	value any
	close func() error
	refs  atomic.Int32
}

func (p *part) release() error {
	if p.refs.Add(-1) == 0 && p.close != nil {
		return p.close()
	}
	return nil
}

// Close closes what this build made and no later build (of a reload)
// still uses: limiters' sweepers, Redis clients it created, the Redis
// layers' renewers. Release every lease of its chain first.
func (b *Built) Close() error {
	var errs []error
	// Last made, first released: a layer goes before the Redis client it
	// uses, so that the fleet layer can still leave the fleet.
	for i := len(b.parts) - 1; i >= 0; i-- {
		if err := b.parts[i].release(); err != nil {
			errs = append(errs, err)
		}
	}
	b.parts = nil
	return errors.Join(errs...)
}

// Build validates f and builds its chain. Errors are Errors, as Validate
// returns them, with the field paths of f.
func Build(f *File, opts Options) (*Built, error) {
	if err := Validate(f, opts); err != nil {
		return nil, err
	}
	return build(f, opts, nil)
}

// builder makes one build, taking the parts of prev whose definitions
// match instead of making new ones.
type builder struct {
	f    *File
	opts Options
	prev map[string]*part
	used map[string]*part
	out  *Built
}

func build(f *File, opts Options, prev *Built) (out *Built, err error) {
	b := &builder{f: f, opts: opts, out: &Built{File: f}, prev: map[string]*part{}, used: map[string]*part{}}
	if prev != nil {
		for _, p := range prev.parts {
			b.prev[p.key] = p
		}
	}
	defer func() {
		if err != nil {
			b.out.Close()
		}
	}()
	var errs Errors
	// The worker layer first: elastic layers before it read its headroom.
	workers := map[int]shed.Layer{}
	for i := range f.Layers {
		if w := f.Layers[i].Worker; w != nil {
			l, err := b.worker(w)
			if err != nil {
				errs = append(errs, &Error{Path: "layers[" + strconv.Itoa(i) + "].worker", Msg: err.Error()})
				continue
			}
			workers[i] = l
			if b.opts.Headroom == nil {
				b.opts.Headroom = l
			}
		}
	}
	var layers []shed.Layer
	for i := range f.Layers {
		l := &f.Layers[i]
		path := "layers[" + strconv.Itoa(i) + "]"
		var built []shed.Layer
		var err error
		switch {
		case l.RateLimit != nil:
			path += ".ratelimit"
			built, err = b.rateLimit(l.RateLimit)
		case l.Concurrency != nil:
			path += ".concurrency"
			built, err = b.concurrency(l.Concurrency)
		case l.Fleet != nil:
			path += ".fleet"
			built, err = b.fleet(l.Fleet)
		case l.Worker != nil:
			if w, ok := workers[i]; ok {
				built = []shed.Layer{w}
			}
		}
		if err != nil {
			errs = append(errs, &Error{Path: path, Msg: err.Error()})
			continue
		}
		layers = append(layers, built...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: opts.Observer, Clock: opts.Clock})
	if err != nil {
		return nil, Errors{{Path: "layers", Msg: err.Error()}}
	}
	b.out.Chain = chain
	h, err := httpConfig(&f.HTTP, opts.HTTP)
	if err == nil {
		b.out.mw, err = shedhttp.New(chain, h)
	}
	if err != nil {
		return nil, Errors{{Path: "http", Msg: err.Error()}}
	}
	b.out.HTTP = h
	return b.out, nil
}

// part returns the part built from the definition key: the previous
// build's when it has one, else a new one from make.
func (b *builder) part(key string, make func() (any, func() error, error)) (any, error) {
	if p, ok := b.used[key]; ok {
		return p.value, nil // shared within the build: the Redis client
	}
	if p, ok := b.prev[key]; ok {
		p.refs.Add(1)
		b.out.parts = append(b.out.parts, p)
		b.used[key] = p
		return p.value, nil
	}
	v, closer, err := make()
	if err != nil {
		return nil, err
	}
	p := &part{key: key, value: v, close: closer}
	p.refs.Store(1)
	b.out.parts = append(b.out.parts, p)
	b.used[key] = p
	return v, nil
}

// redis returns the client the Redis-backed layers share.
func (b *builder) redis() (redis.UniversalClient, string, error) {
	if b.opts.Redis != nil {
		return b.opts.Redis, "options", nil
	}
	r := b.f.Redis
	if r == nil {
		return nil, "", errors.New("store is redis but there is no redis section")
	}
	key := fmt.Sprintf("redis %+v", *r)
	v, err := b.part(key, func() (any, func() error, error) {
		o := r.options()
		if len(o.Addrs) != 1 || o.MasterName != "" {
			c := redis.NewUniversalClient(o)
			return c, c.Close, nil
		}
		// A single node's client sends the layers' concurrent scripts in
		// batches, one write and one read for many: under load each
		// decision costs less than its own round trip.
		o.MaxRetries = -1 // a batch re-sent would run its scripts twice
		c := redis.NewUniversalClient(o)
		stop := redisx.Pipeline(c, redisFlushers)
		return c, func() error { stop(); return c.Close() }, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(redis.UniversalClient), key, nil
}

// redisFlushers is how many batches of scripts a single node's client has
// in flight at once, as loadshed serve's default.
const redisFlushers = 4

// Defaults of the redis section.
const (
	DefaultRedisDialTimeout = time.Second
	DefaultRedisIOTimeout   = 200 * time.Millisecond
)

func (r *Redis) options() *redis.UniversalOptions {
	o := &redis.UniversalOptions{
		Addrs:                 r.Addrs,
		MasterName:            r.MasterName,
		Username:              r.Username,
		DB:                    r.DB,
		DialTimeout:           r.DialTimeout,
		ReadTimeout:           r.ReadTimeout,
		WriteTimeout:          r.WriteTimeout,
		PoolSize:              r.PoolSize,
		ContextTimeoutEnabled: true,
	}
	if r.Addr != "" {
		o.Addrs = []string{r.Addr}
	}
	if r.PasswordEnv != "" {
		o.Password = os.Getenv(r.PasswordEnv)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultRedisDialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultRedisIOTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultRedisIOTimeout
	}
	return o
}

// enforcement is a section's Enforcement as shed spells it.
func (b *builder) enforcement(e *Enforcement) shed.Enforcement {
	return shed.Enforcement{
		Mode: e.Mode, DryRun: e.DryRun, Action: e.Action,
		Overage: e.Overage, OverageFor: e.OverageFor, OverageCooldown: e.OverageCooldown,
		Headroom: b.opts.Headroom, MinHeadroom: e.MinHeadroom,
		Queue: shed.QueueConfig{MaxLength: e.Queue.MaxLength, MaxWait: e.Queue.MaxWait,
			AdaptiveLIFO: e.Queue.AdaptiveLIFO, Clock: b.opts.Clock},
	}
}

// newPart is a part no later build takes over.
func newPart(v any, closer func() error) *part {
	p := &part{key: fmt.Sprintf("own %p", v), value: v, close: closer}
	p.refs.Store(1)
	return p
}
