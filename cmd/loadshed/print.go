package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/fleet"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/worker"
)

func printCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, "loadshed print: name one file\n", usage)
		return 2
	}
	b, err := config.Load(args[0], options())
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			fmt.Fprintf(stderr, "%v\n%s: %d error%s (loadshed check lists them too)\n", err, args[0], len(es), plural(len(es)))
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	defer b.Close()
	printFile(stdout, b.File)
	return 0
}

func table(w io.Writer, title string, header string, rows [][]string) {
	fmt.Fprintf(w, "%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.ReplaceAll(header, " ", "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func printFile(w io.Writer, f *config.File) {
	var layers, rules, conc, fleets, workers [][]string
	n := 0
	row := func(name, kind string, e *config.Enforcement, dry bool, store config.Store) {
		n++
		layers = append(layers, []string{strconv.Itoa(n), name, kind, mode(e), yesNo(dry), e.Action.String(), queue(e), store.String()})
	}
	for _, l := range f.Layers {
		switch {
		case l.RateLimit != nil:
			r := l.RateLimit
			name := orDefault(r.Name, ratelimit.DefaultName)
			shadow := false
			for _, ru := range r.Rules() {
				layer := name
				enforced := "yes"
				if ru.Shadow && !r.DryRun {
					layer, shadow = name+"-shadow", true
				}
				if ru.Shadow {
					enforced = "no (shadow)"
				}
				rules = append(rules, []string{layer, ru.Name, entries(ru.Entries), limit(ru.Rate), ru.Rate.Algorithm.String(), burst(ru.Rate), enforced})
			}
			if shadow {
				row(name+"-shadow", "ratelimit", &r.Enforcement, true, r.Store)
			}
			row(name, "ratelimit", &r.Enforcement, r.DryRun, r.Store)
		case l.Concurrency != nil:
			c := l.Concurrency
			name := orDefault(c.Name, concurrency.DefaultName)
			row(name, "concurrency", &c.Enforcement, c.DryRun, c.Store)
			conc = append(conc, []string{name, orNone(c.Limit), orNone(c.PerKey), c.KeyBy.String(), durOr(c.RetryAfter, concurrency.DefaultRetryAfter), adaptive(c.Adaptive)})
		case l.Fleet != nil:
			fl := l.Fleet
			name := orDefault(fl.Name, fleet.DefaultName)
			row(name, "fleet", &fl.Enforcement, fl.DryRun, config.RedisStore)
			capacity := strconv.FormatInt(fl.Capacity, 10)
			if fl.PerInstance > 0 {
				capacity = strconv.FormatInt(fl.PerInstance, 10) + " per instance"
			}
			fleets = append(fleets, []string{name, capacity, ceilings(fl.Ceilings), durOr(fl.Interval, fleet.DefaultInterval), orDefault(fl.Prefix, fleet.DefaultPrefix), orDefault(fl.Instance, "host-pid")})
		case l.Worker != nil:
			w := l.Worker
			name := orDefault(w.Name, worker.DefaultName)
			row(name, "worker", &w.Enforcement, w.DryRun, config.MemoryStore)
			budget := "detected"
			if w.CPU.Budget > 0 {
				budget = strconv.FormatFloat(w.CPU.Budget, 'f', -1, 64) + " CPUs"
			}
			if w.CPU.Disable {
				budget = "off"
			}
			workers = append(workers, []string{name,
				ratio(w.ShedAt, worker.DefaultShedAt) + " / " + ratio(w.RecoverBelow, worker.DefaultRecoverBelow),
				budget, durOr(w.SchedLatencyTarget, worker.DefaultSchedLatencyTarget), orNone(w.Workers),
				durOr(w.Interval, worker.DefaultInterval), durOr(w.Recovery, worker.DefaultRecovery), yesNo(w.ShedCritical)})
		}
	}
	table(w, "LAYERS (in the order a request meets them)", "# NAME KIND MODE DRY-RUN ACTION QUEUE STORE", layers)
	if len(rules) > 0 {
		table(w, "RATE LIMITS", "LAYER RULE DESCRIPTORS LIMIT ALGORITHM BURST ENFORCED", rules)
	}
	if len(conc) > 0 {
		table(w, "CONCURRENCY LIMITS", "LAYER LIMIT PER-KEY KEY-BY RETRY-AFTER ADAPTIVE", conc)
	}
	if len(fleets) > 0 {
		table(w, "FLEET USAGE", "LAYER CAPACITY CEILINGS INTERVAL PREFIX INSTANCE", fleets)
	}
	if len(workers) > 0 {
		table(w, "WORKER UTILIZATION", "LAYER SHED-AT/RECOVER-BELOW CPU-BUDGET SCHED-LATENCY WORKERS INTERVAL RECOVERY SHEDS-CRITICAL", workers)
	}
	printHTTP(w, &f.HTTP)
	if f.Redis != nil {
		printRedis(w, f.Redis)
	}
}

func printHTTP(w io.Writer, h *config.HTTP) {
	var routes [][]string
	keys := make([]string, 0, len(h.Priorities))
	for k := range h.Priorities {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		routes = append(routes, []string{k, h.Priorities[k].String()})
	}
	def := h.DefaultPriority
	if !def.Valid() {
		def = shed.Default
	}
	routes = append(routes, []string{"(any other route)", def.String()})
	table(w, "ROUTE PRIORITIES (the most specific pattern wins)", "ROUTE PRIORITY", routes)

	key := h.Key.From.String()
	if h.Key.From == config.Header {
		key += " " + h.Key.Header
	}
	if h.Key.Hash {
		key += " (hashed)"
	}
	maxKey := h.MaxKeyLength
	if maxKey == 0 {
		maxKey = shedhttp.DefaultMaxKeyLength
	}
	proxies := "none (the peer's address)"
	if len(h.TrustedProxies) > 0 {
		proxies = strings.Join(h.TrustedProxies, ", ")
	}
	ipHeader := h.ClientIPHeader
	if ipHeader == "" {
		ipHeader = "X-Forwarded-For, Forwarded"
	}
	table(w, "HTTP", "SETTING VALUE", [][]string{
		{"key", key},
		{"without-a-key", h.OnKeyError.String()},
		{"max-key-length", strconv.Itoa(maxKey)},
		{"trusted-proxies", proxies},
		{"client-ip-header", ipHeader},
		{"legacy-headers", yesNo(h.LegacyHeaders)},
	})
}

func printRedis(w io.Writer, r *config.Redis) {
	addr := r.Addr
	if addr == "" {
		addr = strings.Join(r.Addrs, ", ")
	}
	if r.MasterName != "" {
		addr += " (sentinels of " + r.MasterName + ")"
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = ratelimit.DefaultRedisTimeout
	}
	inst := r.ExpectedInstances
	if inst == 0 {
		inst = 1
	}
	table(w, "REDIS", "SETTING VALUE", [][]string{
		{"address", addr},
		{"db", strconv.Itoa(r.DB)},
		{"dial-timeout", durOr(r.DialTimeout, config.DefaultRedisDialTimeout)},
		{"read-timeout", durOr(r.ReadTimeout, config.DefaultRedisIOTimeout)},
		{"write-timeout", durOr(r.WriteTimeout, config.DefaultRedisIOTimeout)},
		{"decision-timeout", timeout.String()},
		{"expected-instances", strconv.Itoa(inst)},
	})
}

func durOr(d, def time.Duration) string {
	if d == 0 {
		d = def
	}
	return d.String()
}

func mode(e *config.Enforcement) string {
	over := e.Overage
	if over == 0 {
		over = shed.DefaultOverage
	}
	pct := strconv.FormatFloat(over*100, 'f', -1, 64) + "%"
	switch e.Mode {
	case shed.Soft:
		d := e.OverageFor
		if d == 0 {
			d = shed.DefaultOverageFor
		}
		c := e.OverageCooldown
		if c == 0 {
			c = d
		}
		return "soft (+" + pct + " for " + d.String() + ", cool-down " + c.String() + ")"
	case shed.Elastic:
		h := shed.DefaultMinHeadroom
		if e.MinHeadroom != nil {
			h = *e.MinHeadroom
		}
		return "elastic (+" + pct + " while headroom ≥ " + strconv.FormatFloat(h, 'f', -1, 64) + ")"
	}
	return e.Mode.String()
}

func queue(e *config.Enforcement) string {
	if e.Action != shed.Queue {
		return "-"
	}
	s := strconv.Itoa(e.Queue.MaxLength) + " for " + e.Queue.MaxWait.String()
	if e.Queue.AdaptiveLIFO {
		s += ", adaptive LIFO"
	}
	return s
}

func entries(ds []config.Descriptor) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Key
		if d.Value != "" {
			parts[i] += "=" + strconv.Quote(d.Value)
		}
	}
	return strings.Join(parts, " > ")
}

func limit(r config.Rate) string {
	return strconv.FormatInt(r.RequestsPerUnit, 10) + "/" + r.Unit.String()
}

func burst(r config.Rate) string {
	switch r.Algorithm {
	case ratelimit.TokenBucket, ratelimit.LeakyBucket:
		if r.Burst > 0 {
			return strconv.FormatInt(r.Burst, 10)
		}
		return strconv.FormatInt(r.RequestsPerUnit, 10)
	}
	return "-"
}

func adaptive(a *config.Adaptive) string {
	if a == nil {
		return "off"
	}
	window := a.Window
	if window == 0 {
		window = concurrency.DefaultAdaptiveWindow
	}
	samples := a.MinSamples
	if samples == 0 {
		samples = concurrency.DefaultAdaptiveMinSamples
	}
	tol, smooth := a.Tolerance, a.Smoothing
	if tol == 0 {
		tol = concurrency.DefaultAdaptiveTolerance
	}
	if smooth == 0 {
		smooth = concurrency.DefaultAdaptiveSmoothing
	}
	return fmt.Sprintf("%d..%d, window %v, min %d samples, tolerance %v, smoothing %v", a.Floor, a.Ceiling, window, samples, tol, smooth)
}

func orNone(n int64) string {
	if n == 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ceilings(m map[shed.Priority]float64) string {
	defaults := map[shed.Priority]float64{shed.Critical: fleet.DefaultCeilingCritical, shed.Default: fleet.DefaultCeilingDefault,
		shed.Sheddable: fleet.DefaultCeilingSheddable, shed.TestMode: fleet.DefaultCeilingTestMode}
	var parts []string
	ps := shed.Priorities()
	for i := len(ps) - 1; i >= 0; i-- {
		v, ok := m[ps[i]]
		if !ok {
			v = defaults[ps[i]]
		}
		parts = append(parts, ps[i].String()+" "+strconv.FormatFloat(v, 'f', -1, 64))
	}
	return strings.Join(parts, ", ")
}

func ratio(v, def float64) string {
	if v == 0 {
		v = def
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
