package config

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

// maxDepth is how deep descriptors nest: one rule's entries.
const maxDepth = ratelimit.MaxDescriptors

// builtinDescriptors are the descriptor keys every request has.
var builtinDescriptors = []string{"key", "route", "priority"}

// Validate checks a File built in Go as Parse checks a file, and returns
// every problem (as Errors, each naming the field's path) or nil.
func Validate(f *File, opts Options) error {
	if f == nil {
		return Errors{{Msg: "no configuration (nil *File)"}}
	}
	return validate(f, opts).err()
}

type checker struct {
	opts     Options
	errs     Errors
	warns    Errors
	headroom bool // a headroom signal exists: a worker layer or Options.Headroom
}

func (c *checker) errorf(path string, allowed []string, format string, args ...any) {
	c.errs = append(c.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...), Allowed: allowed})
}

// warnf records a setting that is valid but almost certainly not what was
// meant (File.Warnings).
func (c *checker) warnf(path string, format string, args ...any) {
	c.warns = append(c.warns, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func validate(f *File, opts Options) Errors {
	c := &checker{opts: opts}
	for _, l := range f.Layers {
		if l.Worker != nil {
			c.headroom = true
		}
	}
	c.headroom = c.headroom || opts.Headroom != nil
	c.durations(reflect.ValueOf(f).Elem(), "")
	c.redis(f)
	c.http(&f.HTTP)
	c.grpc(&f.GRPC)
	if len(f.Layers) == 0 {
		c.errorf("layers", layerKinds, "at least one layer is required")
	}
	names := map[string]string{}
	name := func(path, n, def string) {
		if n == "" {
			n = def
		}
		if first, dup := names[n]; dup {
			c.errorf(path, nil, "a second layer named %q (the first is %s): give each its own name", n, first)
			return
		}
		names[n] = path
	}
	layers, workers, fleets := 0, 0, 0
	for i := range f.Layers {
		l := &f.Layers[i]
		p := "layers[" + strconv.Itoa(i) + "]"
		set := 0
		if l.RateLimit != nil {
			set++
			rp := p + ".ratelimit"
			enforcing, shadow := c.rateLimit(l.RateLimit, rp)
			if enforcing > 0 {
				layers++
				name(rp+".name", l.RateLimit.Name, ratelimit.DefaultName)
			}
			if shadow > 0 {
				layers++
				name(rp+".name", l.RateLimit.layerName()+shadowSuffix, "")
			}
		}
		if l.Concurrency != nil {
			set++
			layers++
			cp := p + ".concurrency"
			c.concurrency(l.Concurrency, cp)
			name(cp+".name", l.Concurrency.Name, "concurrency")
		}
		if l.Fleet != nil {
			set++
			layers++
			fleets++
			fp := p + ".fleet"
			c.fleet(f, l.Fleet, fp)
			name(fp+".name", l.Fleet.Name, "fleet")
		}
		if l.Worker != nil {
			set++
			layers++
			wp := p + ".worker"
			if workers++; workers > 1 {
				c.errorf(wp, nil, "a second worker layer: a process has one CPU budget, and elastic layers read one headroom")
			}
			c.worker(l.Worker, wp)
			name(wp+".name", l.Worker.Name, "worker")
		}
		switch set {
		case 0:
			c.errorf(p, layerKinds, "a layer needs one section")
		case 1:
		default:
			c.errorf(p, layerKinds, "a layer has one section; put each in its own list item")
		}
	}
	if c.opts.MemoryOnly && layers > 0 && layers == fleets {
		c.errorf("layers", nil, "every layer is a fleet layer, which needs Redis: in memory (loadshed try) no layer would remain")
	}
	if layers > shed.MaxLayers {
		c.errorf("layers", nil, "the chain would have %d layers (shadow-mode rules take one of their own), at most %d are supported", layers, shed.MaxLayers)
	}
	f.warnings = c.warns
	return c.errs
}

var layerKinds = []string{"ratelimit", "concurrency", "fleet", "worker"}

func (c *checker) redis(f *File) {
	r := f.Redis
	if r == nil {
		if c.opts.Redis != nil || c.opts.MemoryOnly {
			return
		}
		// Every section that needs Redis is named, several of one list
		// item included: a file fixed one error at a time would otherwise
		// fail again on the next.
		for i, l := range f.Layers {
			p := "layers[" + strconv.Itoa(i) + "]"
			if l.RateLimit != nil && l.RateLimit.Store == RedisStore {
				c.errorf(p+".ratelimit.store", nil, "this layer shares its counts through Redis, and the file has no redis section")
			}
			if l.Concurrency != nil && l.Concurrency.Store == RedisStore {
				c.errorf(p+".concurrency.store", nil, "this layer shares its counts through Redis, and the file has no redis section")
			}
			if l.Fleet != nil {
				c.errorf(p+".fleet", nil, "this layer shares its counts through Redis, and the file has no redis section")
			}
		}
		return
	}
	switch {
	case r.Addr == "" && len(r.Addrs) == 0:
		c.errorf("redis.addr", nil, "redis needs addr (one server) or addrs (a cluster, or sentinels)")
	case r.Addr != "" && len(r.Addrs) > 0:
		c.errorf("redis.addrs", nil, "set addr or addrs, not both")
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		c.errorf("redis.master_name", nil, "master_name needs the sentinels' addresses in addrs")
	}
	if r.PasswordEnv != "" {
		if _, ok := os.LookupEnv(r.PasswordEnv); !ok {
			c.errorf("redis.password_env", nil, "the environment variable %s is not set", r.PasswordEnv)
		}
	}
	c.nonNegative("redis.db", int64(r.DB))
	c.nonNegative("redis.pool_size", int64(r.PoolSize))
	c.nonNegative("redis.expected_instances", int64(r.ExpectedInstances))
}

func (c *checker) nonNegative(path string, v int64) {
	if v < 0 {
		c.errorf(path, nil, "must not be negative, got %d", v)
	}
}

func (c *checker) http(h *HTTP) {
	switch h.Key.From {
	case Header:
		if h.Key.Header == "" {
			c.errorf("http.key.header", nil, "from: header needs the header's name")
		}
	default:
		if h.Key.Header != "" {
			c.errorf("http.key.header", nil, "header is set but from is %s: write from: header", h.Key.From)
		}
	}
	for i, p := range h.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err == nil {
			continue
		}
		if _, err := netip.ParseAddr(p); err == nil {
			continue
		}
		c.errorf("http.trusted_proxies["+strconv.Itoa(i)+"]", nil, "%q is neither an IP address nor a CIDR prefix", p)
	}
	if _, err := shedhttp.NewClientIP(shedhttp.ClientIPConfig{Header: h.ClientIPHeader}); err != nil && h.ClientIPHeader != "" {
		c.errorf("http.client_ip_header", nil, "%q is not a valid header name", h.ClientIPHeader)
	}
	if h.Key.Hash && h.Key.From == ClientIP {
		c.errorf("http.key.hash", nil, "hash applies to header and bearer keys, not to client-ip")
	}
	c.nonNegative("http.max_key_length", int64(h.MaxKeyLength))
	keys := make([]string, 0, len(h.Priorities))
	for k := range h.Priorities {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := shedhttp.ParseRoutePriorities(map[string]string{k: h.Priorities[k].String()}); err != nil {
			c.errorf("http.priorities["+strconv.Quote(k)+"]", nil, "%v", err)
		}
	}
}

func (c *checker) enforcement(e *Enforcement, path string) {
	if e.Mode == shed.Elastic && !c.headroom {
		c.errorf(path+".mode", nil, "elastic mode needs a headroom signal: add a worker layer (or give Options.Headroom)")
	}
	if e.Overage < 0 || math.IsNaN(e.Overage) || math.IsInf(e.Overage, 0) {
		c.errorf(path+".overage", nil, "must be a non-negative fraction (0.1 is 10%%), got %v", e.Overage)
	}
	if e.MinHeadroom != nil && !(*e.MinHeadroom >= 0 && *e.MinHeadroom <= 1) {
		c.errorf(path+".min_headroom", nil, "must be within [0, 1], got %v", *e.MinHeadroom)
	}
	q := e.Queue
	if e.Action == shed.Queue {
		if q.MaxLength < 1 {
			c.errorf(path+".queue.max_length", nil, "action is queue: max_length must be at least 1, got %d", q.MaxLength)
		}
		if q.MaxWait <= 0 {
			c.errorf(path+".queue.max_wait", nil, "action is queue: max_wait must be positive (\"500ms\")")
		}
	} else if q != (Queue{}) {
		c.errorf(path+".queue", nil, "queue bounds are set but action is %s: write action: queue, or remove them", e.Action)
	}
}

func (c *checker) rateLimit(r *RateLimit, path string) (enforcing, shadow int) {
	c.enforcement(&r.Enforcement, path)
	if r.Name != "" && !ratelimit.ValidName(r.Name) {
		c.errorf(path+".name", nil, "%q must be 1 to 64 letters, digits, '-', '_' or '.'", r.Name)
	}
	c.nonNegative(path+".max_keys", int64(r.MaxKeys))
	c.prefix(path+".prefix", r.Prefix, r.Store)
	if len(r.Descriptors) == 0 {
		c.errorf(path+".descriptors", nil, "at least one descriptor with a rate_limit is required")
	}
	c.descriptors(r.Descriptors, path, 1)
	names := map[string]string{}
	for _, ru := range r.rules(path) {
		if ru.shadow && !r.DryRun {
			shadow++
		} else {
			enforcing++
		}
		if !ratelimit.ValidName(ru.name) {
			c.errorf(ru.path+".name", nil, "%q must be 1 to 64 letters, digits, '-', '_' or '.'", ru.name)
		}
		if first, dup := names[ru.name]; dup {
			c.errorf(ru.path, nil, "a second rule named %q (the first is %s): set name on one of them", ru.name, first)
		}
		names[ru.name] = ru.path
		c.rate(&ru.rate, ru.path+".rate_limit", r.Store)
	}
	if enforcing > ratelimit.MaxRules || shadow > ratelimit.MaxRules {
		c.errorf(path+".descriptors", nil, "%d rules (%d in shadow mode); one layer holds at most %d of each", enforcing+shadow, shadow, ratelimit.MaxRules)
	}
	return enforcing, shadow
}

func (c *checker) descriptorKeys() []string {
	keys := append([]string(nil), builtinDescriptors...)
	extra := make([]string, 0, len(c.opts.Descriptors))
	for k := range c.opts.Descriptors {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	return append(keys, extra...)
}

func (c *checker) descriptors(ds []Descriptor, path string, depth int) {
	for i := range ds {
		d := &ds[i]
		p := path + ".descriptors[" + strconv.Itoa(i) + "]"
		if depth > maxDepth {
			c.errorf(p, nil, "descriptors nest at most %d deep", maxDepth)
			return
		}
		switch {
		case d.Key == "":
			c.errorf(p+".key", c.descriptorKeys(), "key is required")
		case d.Key == "key" || d.Key == "route":
		case d.Key == "priority":
			if d.Value != "" {
				if _, err := shed.ParsePriority(d.Value); err != nil {
					c.errorf(p+".value", enums[typePriority].words, "unknown priority %q", d.Value)
				}
			}
		default:
			if _, ok := c.opts.Descriptors[d.Key]; !ok {
				c.errorf(p+".key", c.descriptorKeys(), "unknown descriptor key %q", d.Key)
			}
		}
		if d.RateLimit == nil && len(d.Descriptors) == 0 {
			c.errorf(p, nil, "a descriptor needs a rate_limit, nested descriptors, or both")
		}
		if d.RateLimit == nil {
			if d.Name != "" {
				c.errorf(p+".name", nil, "name names a rule: this descriptor has no rate_limit")
			}
			if d.ShadowMode {
				c.errorf(p+".shadow_mode", nil, "shadow_mode applies to a rule: this descriptor has no rate_limit")
			}
		}
		c.descriptors(d.Descriptors, p, depth+1)
	}
}

func (c *checker) rate(r *Rate, path string, store Store) {
	if r.Unit == 0 {
		c.errorf(path+".unit", enums[typeUnit].words, "unit is required")
	}
	if r.RequestsPerUnit < 1 {
		c.errorf(path+".requests_per_unit", nil, "must be at least 1, got %d", r.RequestsPerUnit)
	}
	c.nonNegative(path+".burst", r.Burst)
	if r.Unit == 0 || r.RequestsPerUnit < 1 || r.Burst < 0 {
		return
	}
	if err := r.limit().ValidateFor(r.Algorithm); err != nil {
		c.errorf(path, nil, "%s", strings.TrimPrefix(err.Error(), "ratelimit: "))
	}
}

// limit is the rate as ratelimit spells it.
func (r *Rate) limit() ratelimit.Limit {
	return ratelimit.Limit{Quantity: r.RequestsPerUnit, Period: r.Unit.Period(), Burst: r.Burst}
}

func (c *checker) concurrency(cc *Concurrency, path string) {
	c.enforcement(&cc.Enforcement, path)
	c.nonNegative(path+".limit", cc.Limit)
	c.nonNegative(path+".per_key", cc.PerKey)
	if cc.Limit == 0 && cc.PerKey == 0 && cc.Adaptive == nil {
		c.errorf(path, nil, "set limit, per_key or adaptive: a concurrency layer needs at least one limit")
	}
	if cc.Limit > 0 && cc.PerKey > cc.Limit && cc.Adaptive == nil {
		c.warnf(path+".per_key", "%d is above limit (%d), so it never binds: one client may take the whole limit", cc.PerKey, cc.Limit)
	}
	if a := cc.Adaptive; a != nil {
		ap := path + ".adaptive"
		if a.Floor < 1 {
			c.errorf(ap+".floor", nil, "must be at least 1, got %d", a.Floor)
		}
		if a.Ceiling < a.Floor || a.Ceiling < 1 {
			c.errorf(ap+".ceiling", nil, "must be at least floor (%d), got %d", a.Floor, a.Ceiling)
		}
		c.nonNegative(ap+".min_samples", a.MinSamples)
		if a.Tolerance != 0 && !(a.Tolerance >= 1 && a.Tolerance <= 10) {
			c.errorf(ap+".tolerance", nil, "must be within [1, 10], got %v", a.Tolerance)
		}
		if a.Smoothing != 0 && !(a.Smoothing > 0 && a.Smoothing <= 1) {
			c.errorf(ap+".smoothing", nil, "must be within (0, 1], got %v", a.Smoothing)
		}
		if cc.Limit != 0 && a.Floor >= 1 && a.Ceiling >= a.Floor && (cc.Limit < a.Floor || cc.Limit > a.Ceiling) {
			c.errorf(path+".limit", nil, "with adaptive, limit is the starting value and must lie within floor (%d) and ceiling (%d), got %d", a.Floor, a.Ceiling, cc.Limit)
		}
	}
	if cc.Action == shed.Queue && cc.Limit == 0 && cc.Adaptive == nil {
		c.errorf(path+".action", nil, "only the overall limit queues: action queue needs limit or adaptive")
	}
	if cc.Store == RedisStore {
		if cc.Adaptive != nil {
			c.errorf(path+".adaptive", nil, "an adaptive limit is not supported with store: redis")
		}
		if cc.Action == shed.Queue {
			c.errorf(path+".action", nil, "action queue is not supported with store: redis")
		}
	}
	c.fairness(&cc.Fairness, path+".fairness")
	c.prefix(path+".prefix", cc.Prefix, cc.Store)
	if cc.Store != RedisStore {
		if cc.TTL != 0 {
			c.errorf(path+".ttl", nil, "ttl is for store: redis")
		}
		if cc.AsyncRelease {
			c.errorf(path+".async_release", nil, "async_release is for store: redis")
		}
	}
}

func (c *checker) prefix(path, prefix string, store Store) {
	switch {
	case prefix == "":
	case store != RedisStore:
		c.errorf(path, nil, "prefix is for store: redis")
	case strings.ContainsAny(prefix, "{}"):
		c.errorf(path, nil, "must not contain '{' or '}' (they would move the Redis Cluster hash tag), got %q", prefix)
	}
}

// durations refuses negative durations anywhere: a file cannot write one
// (the decoder refuses it), a File built in Go can.
func (c *checker) durations(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c.durations(v.Elem(), path)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			c.durations(v.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Struct:
		fs := fieldsOf(v.Type())
		for _, name := range fs.names {
			f := v.FieldByIndex(fs.index[name])
			if f.Type() == durationType {
				if f.Int() < 0 {
					c.errorf(join(path, name), nil, "must not be negative, got %v", time.Duration(f.Int()))
				}
				continue
			}
			c.durations(f, join(path, name))
		}
	}
}

func (c *checker) fraction(path string, v float64, open bool) {
	if !(v >= 0 && v <= 1) || open && v == 0 {
		c.errorf(path, nil, "must be within [0, 1], got %v", v)
	}
}

func (c *checker) worker(w *Worker, path string) {
	c.enforcement(&w.Enforcement, path)
	if w.Mode == shed.Elastic {
		c.errorf(path+".mode", []string{"hard", "soft"}, "the worker layer is the headroom signal: it cannot be elastic")
	}
	n := len(c.errs)
	c.fraction(path+".smoothing", w.Smoothing, false)
	c.fraction(path+".shed_at", w.ShedAt, false)
	c.fraction(path+".recover_below", w.RecoverBelow, false)
	shedAt, recoverBelow := w.ShedAt, w.RecoverBelow
	if shedAt == 0 {
		shedAt = worker.DefaultShedAt
	}
	if recoverBelow == 0 {
		recoverBelow = worker.DefaultRecoverBelow
	}
	if recoverBelow > shedAt {
		c.errorf(path+".recover_below", nil, "must not be above shed_at (%v), got %v", shedAt, recoverBelow)
	}
	if !(w.RiseGain >= 0) || math.IsInf(w.RiseGain, 0) {
		c.errorf(path+".rise_gain", nil, "must be a positive number, got %v", w.RiseGain)
	}
	if !(w.CPU.Budget >= 0) || math.IsInf(w.CPU.Budget, 0) {
		c.errorf(path+".cpu.budget", nil, "must be a positive number of CPUs, got %v", w.CPU.Budget)
	}
	if !(w.CPU.Full >= 0) || math.IsInf(w.CPU.Full, 0) {
		c.errorf(path+".cpu.full", nil, "must be a positive share of the budget, got %v", w.CPU.Full)
	}
	c.nonNegative(path+".workers", w.Workers)
	c.nonNegative(path+".limit.initial", w.Limit.Initial)
	c.nonNegative(path+".limit.min", w.Limit.Min)
	c.nonNegative(path+".limit.max", w.Limit.Max)
	if w.Limit.Max > 0 && w.Limit.Min > w.Limit.Max {
		c.errorf(path+".limit.min", nil, "must not exceed limit.max (%d), got %d", w.Limit.Max, w.Limit.Min)
	}
	c.nonNegative(path+".busy_workers", w.BusyWorkers)
	if w.BusyWorkers > w.Workers {
		c.errorf(path+".busy_workers", nil, "must not exceed workers (%d), got %d", w.Workers, w.BusyWorkers)
	}
	if w.Yield && w.Workers == 0 {
		c.errorf(path+".yield", nil, "yield needs a worker budget: set workers")
	}
	c.fairness(&w.Fairness, path+".fairness")
	if len(c.errs) > n {
		return
	}
	// Whatever the worker package checks beyond these.
	cfg := workerConfig(w, shed.Enforcement{Mode: w.Mode, DryRun: w.DryRun, Overage: w.Overage, OverageFor: w.OverageFor})
	if err := cfg.Validate(); err != nil {
		c.errorf(path, nil, "%v", err)
	}
}

func (c *checker) fleet(f *File, fl *Fleet, path string) {
	c.enforcement(&fl.Enforcement, path)
	n := len(c.errs)
	c.prefix(path+".prefix", fl.Prefix, RedisStore)
	switch {
	case fl.Capacity < 0:
		c.errorf(path+".capacity", nil, "must not be negative, got %d", fl.Capacity)
	case fl.PerInstance < 0:
		c.errorf(path+".per_instance", nil, "must not be negative, got %d", fl.PerInstance)
	case fl.Capacity == 0 && fl.PerInstance == 0:
		c.errorf(path, nil, "set capacity (units in flight fleet-wide) or per_instance (units per instance)")
	case fl.Capacity > 0 && fl.PerInstance > 0:
		c.errorf(path+".per_instance", nil, "capacity is set too: set one of them")
	}
	for _, p := range shed.Priorities() {
		if v, ok := fl.Ceilings[p]; ok {
			c.fraction(path+".ceilings."+p.String(), v, false)
		}
	}
	defaults := [shed.NumPriorities]float64{fleet.DefaultCeilingTestMode, fleet.DefaultCeilingSheddable, fleet.DefaultCeilingDefault, fleet.DefaultCeilingCritical}
	prios := shed.Priorities()
	eff := func(i int) float64 {
		if v, ok := fl.Ceilings[prios[i]]; ok {
			return v
		}
		return defaults[i]
	}
	for i := 1; i < len(prios); i++ {
		if lo, hi := eff(i-1), eff(i); hi < lo {
			c.errorf(path+".ceilings", nil, "%s's ceiling (%v) is below %s's (%v): a priority may use at least what those below it may", prios[i], hi, prios[i-1], lo)
		}
	}
	if fl.Interval != 0 && fl.Interval < fleet.MinInterval {
		c.errorf(path+".interval", nil, "must be at least %v, got %v", fleet.MinInterval, fl.Interval)
	}
	c.nonNegative(path+".expected_instances", int64(fl.ExpectedInstances))
	if len(c.errs) > n {
		return
	}
	// Whatever the fleet package checks beyond these (ceilings in order,
	// ttl against interval, the instance's name), on a client that is
	// never used.
	cfg := fleetConfig(fl, f.Redis, shed.Enforcement{Mode: fl.Mode, DryRun: fl.DryRun, Overage: fl.Overage, OverageFor: fl.OverageFor, Headroom: shed.HeadroomFunc(func() float64 { return 1 })})
	cfg.Client = checkClient
	if err := cfg.Validate(); err != nil {
		c.errorf(path, nil, "%v", err)
	}
}
