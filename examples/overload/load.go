package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/examples/server/api"
	"github.com/loadshed/loadshed/shed"
)

// The traffic mix: a tenth critical (creating charges), as the issue's
// measurement had it; the rest split between reads, reports and test-mode.
var mix = map[shed.Priority]float64{
	shed.TestMode:  0.10,
	shed.Sheddable: 0.40,
	shed.Default:   0.40,
	shed.Critical:  0.10,
}

// numKeys is how many API keys the clients use.
const numKeys = 64

// result is what became of one request.
type result uint8

const (
	resOK       result = iota // 2xx within the timeout
	resThrottle               // 429
	resShed                   // 503
	resTimeout                // no answer within the timeout
	resError                  // anything else: another status, a refused or reset connection
	numResults
)

// sample is one request's fate.
type sample struct {
	prio    shed.Priority
	res     result
	latency time.Duration
	at      time.Duration // when it was sent, since the flood began
	key     int           // the client's, by index (loadClient.keyName)
	// inside is, for a request served, the part of its latency it spent
	// inside the server's handler chain as the server says
	// (api.ServedHeader); the rest was spent before the first middleware
	// ran, or after the answer was written. 0 when the server did not say.
	inside time.Duration
}

// loadClient sends the demonstration's requests to one or more instances.
type loadClient struct {
	bases   []string
	work    time.Duration
	timeout time.Duration
	client  *http.Client
	next    atomic.Uint64
	// dialer opens every connection, before the flood (openConns) and as
	// the transport asks; addrs are the instances' host:port, as bases.
	dialer *net.Dialer
	addrs  []string
	// warm holds, per address, connections opened before the flood
	// (openConns), handed to the transport as it asks for new ones.
	warm map[string]chan warmConn
	// keys are the API keys by index, when the traffic names them
	// (traffic.keys); nil: client-00, client-01 and so on.
	keys []string
}

// warmConn is a connection opened before the flood, and when.
type warmConn struct {
	conn net.Conn
	at   time.Time
}

// warmFor is how long a connection opened before the flood may wait for
// its first request: the example server closes one that sends no request
// header within 5s (ReadHeaderTimeout).
const warmFor = 3 * time.Second

func newLoadClient(bases []string, work, timeout time.Duration, maxConns int) *loadClient {
	c := &loadClient{bases: bases, work: work, timeout: timeout, dialer: &net.Dialer{Timeout: timeout}, warm: map[string]chan warmConn{}}
	for _, b := range bases {
		addr := strings.TrimPrefix(b, "http://")
		c.addrs = append(c.addrs, addr)
		c.warm[addr] = make(chan warmConn, maxConns)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			for {
				select {
				case w := <-c.warm[addr]:
					if time.Since(w.at) < warmFor {
						return w.conn, nil
					}
					w.conn.Close()
					continue
				default:
				}
				return c.dialer.DialContext(ctx, network, addr)
			}
		},
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	c.client = &http.Client{Transport: tr}
	return c
}

// openConns opens n connections to the instances before a flood, as the
// clients of a service behind a load balancer or with a connection pool
// have them open, so that the flood's requests come over connections
// the server has accepted already. Dialled as the requests come instead,
// at 10x a fresh server's accept queue sometimes overflowed in the
// flood's first moment: the clients opened 11,611 connections instead of
// about 1,150, the kernel refused thousands, and the requests waiting
// on them timed out (docs/overload.md, "Connection storms").
func (c *loadClient) openConns(ctx context.Context, n int) error {
	const dialers = 32
	var (
		wg   sync.WaitGroup
		errs = make(chan error, dialers)
		next atomic.Int64
	)
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				addr := c.addrs[int(i)%len(c.addrs)]
				conn, err := c.dialer.DialContext(ctx, "tcp", addr)
				if err != nil {
					errs <- fmt.Errorf("opening connection %d of %d to %s: %w", i+1, n, addr, err)
					return
				}
				select {
				case c.warm[addr] <- warmConn{conn: conn, at: time.Now()}:
				default:
					conn.Close()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// close closes the connections, idle and unused.
func (c *loadClient) close() {
	c.client.CloseIdleConnections()
	for _, ch := range c.warm {
		for drained := false; !drained; {
			select {
			case w := <-ch:
				w.conn.Close()
			default:
				drained = true
			}
		}
	}
}

// keyName is the API key of index key.
func (c *loadClient) keyName(key int) string {
	if key >= 0 && key < len(c.keys) {
		return c.keys[key]
	}
	return fmt.Sprintf("client-%02d", key)
}

// do sends one request of priority p with the API key of index key and
// reports its fate.
func (c *loadClient) do(ctx context.Context, p shed.Priority, key int) sample {
	base := c.bases[int(c.next.Add(1))%len(c.bases)]
	method, path := http.MethodGet, "/v1/charges"
	switch p {
	case shed.Critical:
		method = http.MethodPost
	case shed.Sheddable:
		path = "/v1/reports"
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path+"?work="+c.work.String(), nil)
	if err != nil {
		return sample{prio: p, res: resError, key: key}
	}
	req.Header.Set(api.KeyHeader, c.keyName(key))
	if p == shed.TestMode {
		req.Header.Set(api.TestModeHeader, "true")
	}
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return sample{prio: p, res: resTimeout, latency: time.Since(start), key: key}
		}
		return sample{prio: p, res: resError, latency: time.Since(start), key: key}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lat := time.Since(start)
	switch {
	case err != nil && ctx.Err() != nil:
		return sample{prio: p, res: resTimeout, latency: lat, key: key}
	case err != nil:
		return sample{prio: p, res: resError, latency: lat, key: key}
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		in, _ := api.ParseServed(resp.Header)
		return sample{prio: p, res: resOK, latency: lat, key: key, inside: in}
	case resp.StatusCode == http.StatusTooManyRequests:
		return sample{prio: p, res: resThrottle, latency: lat, key: key}
	case resp.StatusCode == http.StatusServiceUnavailable:
		return sample{prio: p, res: resShed, latency: lat, key: key}
	}
	return sample{prio: p, res: resError, latency: lat, key: key}
}

// newRand is the generator's source of arrivals, priorities and keys: seeded,
// so that two set-ups are offered the same sequence of requests.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// pickMixed is the demonstration's usual traffic: a priority from the mix,
// a key among numKeys.
func pickMixed(r *rand.Rand) (shed.Priority, int) {
	p := pickPriority(r)
	return p, r.IntN(numKeys)
}

func pickPriority(r *rand.Rand) shed.Priority {
	x := r.Float64()
	for _, p := range shed.Priorities() {
		if x < mix[p] {
			return p
		}
		x -= mix[p]
	}
	return shed.Critical
}

// change is something done to the service mid-flood (its downstream
// slowed down, a neighbour started on its CPU), at a planned time since the
// flood began.
type change struct {
	at    time.Duration
	apply func() error
	// applied is when it was done, since the flood began (set by openLoop);
	// err what went wrong.
	applied time.Duration
	err     error
}

// flood is what openLoop returns: every arrival's fate, the warm-up's too
// (the floor is simulated from the first arrival on), and how late the
// generator sent them.
type flood struct {
	samples []sample
	// lateP99 is the 99th percentile of how late requests were sent
	// against their planned arrival; late is the share sent more than
	// lateBy late. A generator short of CPU sends in bursts, and the
	// server is then offered another load than the one reported.
	lateP99 time.Duration
	late    float64
	// stalled is the share of the generator's goroutines that, made
	// runnable, waited more than stalledBy to run (its Go scheduler's
	// latencies over the flood); stalledP999 their 99.9th percentile.
	// The sends can keep their pace while the goroutines that read the
	// answers wait: each such wait is added to a request's latency, and
	// the server is not its cause (see generatorWaits).
	stalled     float64
	stalledP999 time.Duration
}

// lateBy is how late an arrival may be sent before it counts as late.
const lateBy = 5 * time.Millisecond

// openLoop offers rate requests per second, Poisson arrivals, for warmup +
// measure, whatever the server does with them: a client that waits for an
// answer before sending more (a closed loop) slows down with the server
// and hides its collapse. At most maxInFlight requests are out at once; an
// arrival beyond that is counted as a timeout without being sent, so the
// generator stays bounded however slow the server gets. The changes are
// applied at their times; pick draws each arrival's priority and key. It
// returns once every request has ended (within the client timeout).
func (c *loadClient) openLoop(ctx context.Context, rate float64, warmup, measure time.Duration, maxInFlight int, seed uint64, changes []*change, pick func(*rand.Rand) (shed.Priority, int)) flood {
	rng := newRand(seed)
	var (
		mu       sync.Mutex
		out      = make([]sample, 0, int(rate*(warmup+measure).Seconds()*1.1)+16)
		lates    = make([]time.Duration, 0, cap(out))
		wg       sync.WaitGroup
		inFlight atomic.Int64
	)
	total := warmup + measure
	waits := readSchedLatencies()
	start := time.Now()
	if len(changes) > 0 {
		// One goroutine applies them in turn: a change may undo the last.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ch := range changes {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(ch.at))):
				}
				ch.err = ch.apply()
				ch.applied = time.Since(start)
			}
		}()
	}
	var at time.Duration
	for {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= total {
			break
		}
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return flood{samples: out}
			case <-time.After(d):
			}
		}
		p, key := pick(rng)
		sent := time.Since(start)
		lates = append(lates, sent-at)
		if inFlight.Load() >= int64(maxInFlight) {
			mu.Lock()
			out = append(out, sample{prio: p, res: resTimeout, latency: c.timeout, at: sent, key: key})
			mu.Unlock()
			continue
		}
		inFlight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.do(ctx, p, key)
			s.at = sent
			inFlight.Add(-1)
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	f := flood{samples: out, lateP99: percentile(lates, 0.99)}
	f.stalled, f.stalledP999 = generatorWaits(waits, readSchedLatencies())
	n := 0
	for _, l := range lates {
		if l > lateBy {
			n++
		}
	}
	if len(lates) > 0 {
		f.late = float64(n) / float64(len(lates))
	}
	return f
}

// measured is the samples sent at or after from.
func measured(samples []sample, from time.Duration) []sample {
	var out []sample
	for _, s := range samples {
		if s.at >= from {
			out = append(out, s)
		}
	}
	return out
}

// closedLoop runs workers that each send the next request as soon as the
// last one is answered, for d, and returns the answered requests' samples.
// With enough workers it keeps the server busy all the time: its rate of
// successes is the server's capacity.
func (c *loadClient) closedLoop(ctx context.Context, workers int, d time.Duration, p shed.Priority) []sample {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu  sync.Mutex
		out []sample
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			for ctx.Err() == nil {
				s := c.do(context.Background(), p, w%numKeys)
				if ctx.Err() != nil {
					break // may have been cut short by the end of the run
				}
				mine = append(mine, s)
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// stepStats summarises one priority's samples (or all of them) in one step.
type stepStats struct {
	sent     int
	counts   [numResults]int
	p50, p99 time.Duration // of successes
	goodput  float64       // successes per second
	// outsideP99 is the p99 of the successes' time outside the server's
	// handler chain (their latency less sample.inside), 0 when the server
	// did not say.
	outsideP99 time.Duration
}

func (s stepStats) successRate() float64 {
	if s.sent == 0 {
		return 0
	}
	return float64(s.counts[resOK]) / float64(s.sent)
}

// summarise splits samples by priority; index NumPriorities is all of them.
func summarise(samples []sample, measure time.Duration) [shed.NumPriorities + 1]stepStats {
	var out [shed.NumPriorities + 1]stepStats
	var lats, outside [shed.NumPriorities + 1][]time.Duration
	for _, s := range samples {
		for _, i := range []int{s.prio.Index(), shed.NumPriorities} {
			out[i].sent++
			out[i].counts[s.res]++
			if s.res == resOK {
				lats[i] = append(lats[i], s.latency)
				if s.inside > 0 {
					outside[i] = append(outside[i], max(s.latency-s.inside, 0))
				}
			}
		}
	}
	for i := range out {
		out[i].p50, out[i].p99 = percentile(lats[i], 0.50), percentile(lats[i], 0.99)
		out[i].outsideP99 = percentile(outside[i], 0.99)
		out[i].goodput = float64(out[i].counts[resOK]) / measure.Seconds()
	}
	return out
}

// percentile is the q-th quantile of ds (nearest rank), 0 when empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	i = max(0, min(i, len(ds)-1))
	return ds[i]
}

// stalledBy is how long a goroutine of the load generator may wait to run
// before the wait counts as the generator's stall.
//
// At 50x in the tenant scenarios the generator sends about 5,000 requests
// a second from its one CPU, which it keeps about half busy. On a machine
// where a system call costs two or three times what it costs elsewhere,
// a hiccup there (a garbage collection, a moment of stolen time) left it
// behind, and behind it stayed: more requests out, more goroutines and
// connections, more work for each answer. In runs of tenant-io at 50x its
// CPU was busy without a break for two seconds while the server's idled
// half the time; every request sent meanwhile, refusals of a millisecond
// among them, measured 0.3 to 1s, and the light clients' p99 read 3 to 12
// times the floor's. The goroutines that wait for the answers then wait
// to run: in those runs 1 to 6% of the generator's waits to run lasted
// over 50ms (p99 0.1 to 0.7s), against none to 0.04% (p99 1.6 to 4.2ms)
// in the runs without such a stall, whose light clients' p99 read 1.2 to
// 1.5 times the floor's.
const stalledBy = 50 * time.Millisecond

// readSchedLatencies reads the Go scheduler's latencies of this process
// (how long goroutines waited, runnable, before they ran) so far; nil if
// the runtime does not keep them.
func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// generatorWaits is, between two readings of the scheduler's latencies,
// the share of waits in the buckets from stalledBy up and the 99.9th
// percentile of the waits (the upper bound of its bucket).
func generatorWaits(a, b *metrics.Float64Histogram) (stalled float64, p999 time.Duration) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0, 0
	}
	var total, over uint64
	for i := range b.Counts {
		n := b.Counts[i] - a.Counts[i]
		total += n
		if b.Buckets[i] >= stalledBy.Seconds() {
			over += n
		}
	}
	if total == 0 {
		return 0, 0
	}
	var seen uint64
	for i := range b.Counts {
		seen += b.Counts[i] - a.Counts[i]
		if float64(seen) >= 0.999*float64(total) {
			if up := b.Buckets[i+1]; !math.IsInf(up, 1) {
				p999 = time.Duration(up * float64(time.Second))
			} else {
				p999 = time.Duration(b.Buckets[i] * float64(time.Second))
			}
			break
		}
	}
	return float64(over) / float64(total), p999
}
