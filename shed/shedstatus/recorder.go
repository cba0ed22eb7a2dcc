// Package shedstatus keeps what a status page shows of a chain's layers,
// without speaking HTTP: admitted and shed per second by priority (from
// the chain's observer hooks), the last rejections in a bounded ring, and
// once a second each layer's gauges (layerkit.GaugeReporter) for the last
// five minutes. A Snapshot adds the clients with the largest shares
// (layerkit.ClientReporter), their keys masked unless told otherwise.
//
// Package statuspage renders a Recorder as a live HTML page and as JSON;
// a job runner can log a Snapshot as it is.
//
//	rec := shedstatus.New(shedstatus.Config{Layers: layers})
//	defer rec.Close()
//	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: rec})
//
// The request path pays one atomic add per layer decision and, for a
// rejection, a clock read and a copy into the ring when no reader holds
// it; everything else happens when the page is read or once a second. The
// Recorder reads no latency, so a chain whose only observer it is does not
// time its layers (shed.LatencyReader).
package shedstatus

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadshed/loadshed/internal/clockx"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// Defaults of Config.
const (
	DefaultEvery      = time.Second
	DefaultHistory    = 5 * time.Minute
	DefaultRejections = 32
	DefaultTopClients = 10
)

// MaxLayers bounds the layers a Recorder keeps: those of Config.Layers and
// those it learns from events naming a layer it was not given (a rate
// limit service reports one per domain). Events of further layers are
// dropped.
const MaxLayers = 32

// Config configures a Recorder.
type Config struct {
	// Layers are the chain's layers, in order; the Recorder reads the
	// gauges and clients of those that report them. Events of a layer not
	// listed add it, by name, in the order they come.
	Layers []shed.Layer
	// Clock times the samples and the rejections (default shed.SystemClock).
	Clock shed.Clock
	// Every is how often the layers' gauges are sampled and the rates
	// computed (default DefaultEvery).
	Every time.Duration
	// History is how far back the samples go (default DefaultHistory).
	History time.Duration
	// Rejections is how many of the last rejections are kept (default
	// DefaultRejections).
	Rejections int
	// TopClients is how many clients a layer shows, largest share first
	// (default DefaultTopClients).
	TopClients int
	// ShowKeys shows clients' keys as they are. By default a key is
	// shown masked (MaskKey), so that a page or a log line leaks no API
	// key or personal address.
	ShowKeys bool
	// MaskKey masks a key when ShowKeys is not set. The default is a
	// short digest, stable for the Recorder's life and salted with a
	// random value, so that the same client shows the same mask from one
	// refresh to the next and a mask cannot be matched against guessed
	// keys.
	MaskKey func(key string) string
	// Rules, when set, lists a rate limit service's rules and their
	// counts for the snapshot.
	Rules func() []Rule
	// Reload, when set, says how the last configuration reload went.
	Reload func() Reload
}

// Recorder counts a chain's decisions and samples its layers. Pass it as
// the chain's shed.Config.Observer (alone, or in shed.Observers with
// others). It is safe for concurrent use; Close stops its sampling.
type Recorder struct {
	cfg    Config
	clock  shed.Clock
	every  time.Duration
	points int

	layers atomic.Pointer[[]*layerRec]
	addMu  sync.Mutex // serialises adding layers

	ringMu   sync.Mutex
	ring     []Rejection
	ringNext int
	ringLen  int
	rejected atomic.Uint64

	mu     sync.Mutex // guards the samples and the timer
	timer  shed.Timer
	closed bool
	salt   [16]byte
}

type counts struct {
	admitted, rejected, wouldReject atomic.Uint64
}

type layerRec struct {
	name    string
	kind    string
	gauges  layerkit.GaugeReporter
	clients layerkit.ClientReporter
	counts  [shed.NumPriorities]counts
	// fallback counts decisions taken from a local estimate because the
	// layer's shared store did not answer.
	fallback atomic.Uint64
	_        [64]byte // keeps the next layer's counters off this one's cache line

	// Guarded by Recorder.mu.
	last         time.Time
	prev         [shed.NumPriorities][3]uint64
	rates        [shed.NumPriorities][3]float64
	prevFallback uint64
	fallbackRate float64
	hist         []Point
	histNext     int
}

// New returns a Recorder for cfg's layers and starts its sampling.
func New(cfg Config) (*Recorder, error) {
	if len(cfg.Layers) > MaxLayers {
		return nil, fmt.Errorf("shedstatus: %d layers, at most %d", len(cfg.Layers), MaxLayers)
	}
	if cfg.Every < 0 || cfg.History < 0 || cfg.Rejections < 0 || cfg.TopClients < 0 {
		return nil, errors.New("shedstatus: Every, History, Rejections and TopClients must not be negative")
	}
	r := &Recorder{cfg: cfg, clock: clockx.Or(cfg.Clock), every: cfg.Every}
	if r.every == 0 {
		r.every = DefaultEvery
	}
	hist := cfg.History
	if hist == 0 {
		hist = DefaultHistory
	}
	r.points = max(1, int(hist/r.every))
	if r.cfg.Rejections == 0 {
		r.cfg.Rejections = DefaultRejections
	}
	if r.cfg.TopClients == 0 {
		r.cfg.TopClients = DefaultTopClients
	}
	r.ring = make([]Rejection, r.cfg.Rejections)
	if _, err := rand.Read(r.salt[:]); err != nil {
		return nil, fmt.Errorf("shedstatus: salting the key masks: %w", err)
	}
	now := r.clock.Now()
	ls := make([]*layerRec, 0, len(cfg.Layers))
	for i, l := range cfg.Layers {
		if l == nil {
			return nil, fmt.Errorf("shedstatus: Config.Layers[%d] is nil", i)
		}
		lr := &layerRec{name: l.Name(), kind: kindOf(l), last: now}
		lr.gauges, _ = l.(layerkit.GaugeReporter)
		lr.clients, _ = l.(layerkit.ClientReporter)
		ls = append(ls, lr)
	}
	r.layers.Store(&ls)
	r.mu.Lock()
	r.timer = r.clock.AfterFunc(r.every, r.tick)
	r.mu.Unlock()
	return r, nil
}

// kindOf names a layer's type as a reader knows it: "worker.Layer".
func kindOf(l shed.Layer) string {
	return strings.TrimLeft(fmt.Sprintf("%T", l), "*")
}

// Close stops the sampling. The Recorder still counts and answers
// snapshots, with the samples it has.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// ReadsLatency reports false: the Recorder does not read Event.Latency, so
// a chain whose only observer it is does not time its layers
// (shed.LatencyReader).
func (r *Recorder) ReadsLatency() bool { return false }

// Observe implements shed.Observer.
func (r *Recorder) Observe(e shed.Event) {
	if e.Kind == shed.Released {
		return
	}
	l := r.layer(e.Layer)
	if l == nil {
		return
	}
	if e.Fallback {
		l.fallback.Add(1)
	}
	c := &l.counts[e.Priority.Index()]
	switch e.Kind {
	case shed.Admitted:
		c.admitted.Add(1)
	case shed.WouldReject:
		c.wouldReject.Add(1)
	case shed.Rejected:
		c.rejected.Add(1)
		r.record(&e)
	}
}

// layer finds a layer by name, adding one the Recorder was not given.
func (r *Recorder) layer(name string) *layerRec {
	for _, l := range *r.layers.Load() {
		if l.name == name {
			return l
		}
	}
	return r.addLayer(name)
}

func (r *Recorder) addLayer(name string) *layerRec {
	r.addMu.Lock()
	defer r.addMu.Unlock()
	old := *r.layers.Load()
	for _, l := range old {
		if l.name == name {
			return l
		}
	}
	if len(old) >= MaxLayers {
		return nil
	}
	r.mu.Lock()
	now := r.clock.Now()
	r.mu.Unlock()
	ls := append(append(make([]*layerRec, 0, len(old)+1), old...), &layerRec{name: name, last: now})
	r.layers.Store(&ls)
	return ls[len(ls)-1]
}

// record keeps a rejection in the ring. A rejection that finds the ring
// held by another (a reader, or a rejection at the same moment) is
// counted but not kept, so that the request path never waits for it.
func (r *Recorder) record(e *shed.Event) {
	r.rejected.Add(1)
	if !r.ringMu.TryLock() {
		return
	}
	r.ring[r.ringNext] = Rejection{Time: r.clock.Now(), Layer: e.Layer, Policy: e.Policy, Reason: e.Reason,
		Priority: priorityWord(e.Priority), Status: e.Status, Route: e.Route}
	r.ringNext = (r.ringNext + 1) % len(r.ring)
	r.ringLen = min(r.ringLen+1, len(r.ring))
	r.ringMu.Unlock()
}

func priorityWord(p shed.Priority) string {
	if p == shed.Unset {
		return ""
	}
	return p.String()
}

// tick samples and schedules the next sample.
func (r *Recorder) tick() {
	r.sample()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.timer = r.clock.AfterFunc(r.every, r.tick)
	}
}

// sample reads every layer's gauges and counters once.
func (r *Recorder) sample() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for _, l := range *r.layers.Load() {
		secs := now.Sub(l.last).Seconds()
		if secs <= 0 {
			continue
		}
		var p Point
		p.Time = now.UnixMilli()
		for i := range l.counts {
			cur := [3]uint64{l.counts[i].admitted.Load(), l.counts[i].rejected.Load(), l.counts[i].wouldReject.Load()}
			for k := range cur {
				l.rates[i][k] = float64(cur[k]-l.prev[i][k]) / secs
			}
			l.prev[i] = cur
			p.Admitted += l.rates[i][0]
			p.Shed += l.rates[i][1]
		}
		fb := l.fallback.Load()
		l.fallbackRate = float64(fb-l.prevFallback) / secs
		l.prevFallback = fb
		l.last = now
		if l.gauges != nil {
			l.gauges.ReportGauges(func(g layerkit.Gauge) {
				if math.IsNaN(g.Value) || math.IsInf(g.Value, 0) {
					return
				}
				switch g.Name {
				case layerkit.GaugeInFlight:
					p.InFlight = g.Value
				case layerkit.GaugeQueued:
					p.Queued = g.Value
				case layerkit.GaugeLimit:
					p.Limit = g.Value
				case layerkit.GaugeShedLevel:
					p.ShedLevel = g.Value
				}
			})
		}
		if len(l.hist) < r.points {
			l.hist = append(l.hist, p)
		} else {
			l.hist[l.histNext] = p
			l.histNext = (l.histNext + 1) % len(l.hist)
		}
	}
}

// Sample samples the layers now, as the Recorder does every Config.Every:
// for a test, or for a caller that wants a fresh reading first.
func (r *Recorder) Sample() { r.sample() }

// mask returns key as the snapshot shows it.
func (r *Recorder) mask(key string) string {
	if r.cfg.ShowKeys {
		return key
	}
	if r.cfg.MaskKey != nil {
		return r.cfg.MaskKey(key)
	}
	h := sha256.New()
	h.Write(r.salt[:])
	h.Write([]byte(key))
	return "#" + hex.EncodeToString(h.Sum(nil)[:5])
}
