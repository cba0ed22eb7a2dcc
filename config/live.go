package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/loadshed/loadshed/internal/filewatch"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// ErrClosed is returned by a Live's methods after Close.
var ErrClosed = errors.New("config: the live configuration is closed")

// Reload is the result of one reload, applied or refused.
type Reload struct {
	// Path is the file read.
	Path string
	// Applied says the new configuration serves from now on; when false,
	// Err says why it was refused, and the previous one still serves.
	Applied bool
	// Err is why the file was refused: Errors for a bad file.
	Err error
	// Generation numbers the configurations served, from 1 (Open).
	Generation uint64
	// Kept counts the limiters, layers and clients carried over from the
	// previous configuration (their counts survive); Made those built anew.
	Kept, Made int
}

// Live is a configuration file in service: its chain serves requests
// (Do, Middleware) while Reload, Watch or SIGHUP replaces it.
//
// A reload reads and validates the file first: a bad file is refused,
// logged and counted (Stats), and the running configuration keeps serving.
// A good one is built, carrying over every limiter whose rule did not change
// and every concurrency layer whose section did not (so their rate counts
// and in-flight counts go on), and swapped in atomically: requests that
// arrive afterwards use it; requests already admitted release their leases
// to the layers that granted them. The previous configuration's other
// parts are closed once its last request has finished.
type Live struct {
	path string
	opts Options

	mu   sync.Mutex // serialises reloads
	cur  atomic.Pointer[generation]
	sum  [sha256.Size]byte // the content last applied
	gens uint64

	applied, refused atomic.Int64

	lastMu  sync.Mutex
	lastAt  time.Time // the last reload's time, for LastReload
	lastErr error
}

// generation is one configuration in service, and the requests inside it.
type generation struct {
	n       uint64
	built   *Built
	mw      func(http.Handler) http.Handler
	active  atomic.Int64
	retired atomic.Bool
	done    atomic.Bool
	log     func(error)
}

// Open loads the file at path and puts it in service. Call Watch to follow
// changes, Close when done.
func Open(path string, opts Options) (*Live, error) {
	l := &Live{path: path, opts: opts}
	data, err := readFile(path, opts.Limits)
	if err != nil {
		return nil, err
	}
	g, _, _, err := l.build(data, nil)
	if err != nil {
		return nil, err
	}
	l.sum = sha256.Sum256(data)
	l.cur.Store(g)
	return l, nil
}

func (l *Live) build(data []byte, prev *Built) (*generation, int, int, error) {
	f, pos, err := parse(l.path, data, l.opts)
	if err != nil {
		return nil, 0, 0, err
	}
	b, err := build(f, l.opts, prev)
	if es, ok := err.(Errors); ok {
		return nil, 0, 0, pos.place(l.path, es).err()
	}
	if err != nil {
		return nil, 0, 0, err
	}
	mw := b.Middleware()
	kept := 0
	if prev != nil {
		old := map[*part]bool{}
		for _, p := range prev.parts {
			old[p] = true
		}
		for _, p := range b.parts {
			if old[p] {
				kept++
			}
		}
	}
	l.gens++
	logger := l.opts.logger()
	g := &generation{n: l.gens, built: b, mw: mw, log: func(err error) {
		logger.Error("config: closing a replaced configuration", "path", l.path, "err", err)
	}}
	return g, kept, len(b.parts) - kept, nil
}

// Reload reads the file again and, if it is valid, puts it in service. It
// returns why it refused the file (Errors for a bad one), or nil.
func (l *Live) Reload() error {
	data, err := readFile(l.path, l.opts.Limits)
	if err != nil {
		return l.failed(err)
	}
	return l.reload(data, true)
}

func (l *Live) reload(data []byte, force bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.cur.Load()
	if cur == nil {
		return ErrClosed
	}
	sum := sha256.Sum256(data)
	if !force && sum == l.sum {
		return nil
	}
	g, kept, made, err := l.build(data, cur.built)
	if err != nil {
		return l.report(Reload{Path: l.path, Err: err, Generation: cur.n})
	}
	l.sum = sum
	l.cur.Store(g)
	cur.retire()
	return l.report(Reload{Path: l.path, Applied: true, Generation: g.n, Kept: kept, Made: made})
}

func (l *Live) report(r Reload) error {
	l.lastMu.Lock()
	l.lastAt, l.lastErr = time.Now(), r.Err
	l.lastMu.Unlock()
	log := l.opts.logger()
	if r.Applied {
		l.applied.Add(1)
		log.Info("config: reloaded", "path", r.Path, "generation", r.Generation, "kept", r.Kept, "made", r.Made)
	} else {
		l.refused.Add(1)
		log.Error("config: refused the file; the running configuration keeps serving", "path", r.Path, "generation", r.Generation, "err", ErrorText(r.Err))
	}
	if l.opts.OnReload != nil {
		l.opts.OnReload(r)
	}
	return r.Err
}

// failed reports a file that could not be read.
func (l *Live) failed(err error) error {
	var n uint64
	if g := l.cur.Load(); g != nil {
		n = g.n
	}
	return l.report(Reload{Path: l.path, Err: err, Generation: n})
}

// LastReload returns when the file was last reloaded (Reload, Watch or
// SIGHUP; a file found unchanged does not count) and why it was refused,
// nil when it was applied; a zero time before the first reload. A status
// page shows it.
func (l *Live) LastReload() (at time.Time, err error) {
	l.lastMu.Lock()
	defer l.lastMu.Unlock()
	return l.lastAt, l.lastErr
}

// MaxErrorText bounds ErrorText.
const MaxErrorText = 4096

// ErrorText is err's text cut to MaxErrorText bytes, for a log line or a
// status page: Errors lists at most MaxErrorsShown errors, but one error
// may quote a long value from the file.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if len(msg) <= MaxErrorText {
		return msg
	}
	// Errors: as many whole errors as fit, and the count of the rest.
	var es Errors
	if errors.As(err, &es) && len(es) > 0 {
		var b strings.Builder
		shown := 0
		for _, e := range es {
			line := e.Error()
			if b.Len()+len(line)+1 > MaxErrorText-32 || (shown > 0 && shown == MaxErrorsShown) {
				break
			}
			if shown > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(line)
			shown++
		}
		if shown > 0 {
			b.WriteString("\nand " + strconv.Itoa(len(es)-shown) + " more errors")
			return b.String()
		}
	}
	cut := MaxErrorText
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "… (" + strconv.Itoa(len(msg)-cut) + " bytes more)"
}

// Stats returns how many reloads were applied and how many refused.
func (l *Live) Stats() (applied, refused int64) { return l.applied.Load(), l.refused.Load() }

// Current returns the configuration in service, for inspection: serve
// requests through Do or Middleware, which keep a replaced configuration
// open until its requests end. Nil after Close.
func (l *Live) Current() *Built {
	if g := l.cur.Load(); g != nil {
		return g.built
	}
	return nil
}

// enter returns the generation in service, counted as in use until leave.
func (l *Live) enter() *generation {
	for {
		g := l.cur.Load()
		if g == nil {
			return nil
		}
		g.active.Add(1)
		if !g.retired.Load() {
			return g
		}
		// Replaced between the load and the count: the next one serves.
		g.leave()
	}
}

func (g *generation) leave() {
	if g.active.Add(-1) == 0 && g.retired.Load() {
		g.finish()
	}
}

// retire takes g out of service; it closes once its last request leaves.
func (g *generation) retire() {
	g.retired.Store(true)
	if g.active.Load() == 0 {
		g.finish()
	}
}

func (g *generation) finish() {
	if g.done.CompareAndSwap(false, true) {
		if err := g.built.Close(); err != nil {
			g.log(err)
		}
	}
}

// Do runs fn through the chain in service, as shed.Chain.Do does.
func (l *Live) Do(ctx context.Context, req shed.Request, fn func(context.Context) error) error {
	g := l.enter()
	if g == nil {
		return ErrClosed
	}
	defer g.leave()
	return g.built.Chain.Do(ctx, req, fn)
}

// Middleware returns net/http middleware that runs every request through
// the configuration in service (its chain and its http section), as
// Built.Middleware does for one build. Its Close does nothing: close l.
func (l *Live) Middleware() shedhttp.Middleware {
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &liveHandler{l: l, next: next}
	}
}

type liveHandler struct {
	l     *Live
	next  http.Handler
	cache atomic.Pointer[wrapped]
}

// wrapped is next behind one generation's middleware, built once per
// generation.
type wrapped struct {
	g *generation
	h http.Handler
}

func (h *liveHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := h.l.enter()
	if g == nil {
		http.Error(w, "the service is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer g.leave()
	c := h.cache.Load()
	if c == nil || c.g != g {
		c = &wrapped{g: g, h: g.mw(h.next)}
		h.cache.Store(c)
	}
	c.h.ServeHTTP(w, r)
}

// Close takes the configuration out of service; it is closed once its last
// request ends. Do then returns ErrClosed, and the middleware answers 503.
func (l *Live) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.cur.Swap(nil); g != nil {
		g.retire()
	}
	return nil
}

// Watch reloads the file when it changes (through its directory, so that
// editors that replace the file and Kubernetes' ConfigMap symlink swaps are
// seen) and on SIGHUP, until ctx ends. A change that leaves the content as
// it was reloads nothing; SIGHUP always reloads. A burst of writes is read
// once, 100ms after its first. A change made after Open read the file and
// before Watch began is read too.
// Refused files are logged and counted, as by Reload. It returns ctx's
// error, or why it could not watch.
func (l *Live) Watch(ctx context.Context) error {
	return filewatch.Path(ctx, l.path, func() {
		data, err := readFile(l.path, l.opts.Limits)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) { // being replaced: its Create follows
				l.failed(err)
			}
			return
		}
		l.reload(data, false)
	}, func() { l.Reload() }, func(err error) {
		l.opts.logger().Error("config: watching the file", "path", l.path, "err", err)
	})
}
