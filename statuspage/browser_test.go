package statuspage_test

// The page in a real browser: headless Chromium (Debian's chromium
// package; scripts/test.sh installs it), driven with chromedp, against a
// server under load that the test starts on loopback.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/statuspage"
	"github.com/loadshed/loadshed/worker"
)

var screenshot = flag.String("screenshot", os.Getenv("LOADSHED_SCREENSHOT"),
	"save a screenshot of the status page under load to this PNG file (docs/status.png for the README) [LOADSHED_SCREENSHOT]")

// chromium finds the browser: LOADSHED_CHROMIUM, else chromium on PATH.
// It skips the test when there is none, unless LOADSHED_REQUIRE_CHROMIUM=1
// says the run must have it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOADSHED_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LOADSHED_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium not found, and LOADSHED_REQUIRE_CHROMIUM=1: install Debian's chromium package (scripts/test.sh does) or set LOADSHED_CHROMIUM")
	}
	t.Skip("chromium not found: the browser tests need Debian's chromium package (scripts/test.sh installs it) or LOADSHED_CHROMIUM set to a Chromium binary")
	return ""
}

// clientsLayer admits everything and reports the clients in flight by
// key, as the fair-share layers do: the page must never show these keys.
type clientsLayer struct {
	mu   sync.Mutex
	held map[string]int64
}

func (c *clientsLayer) Name() string { return "clients" }

func (c *clientsLayer) Acquire(_ context.Context, req shed.Request) (shed.Lease, error) {
	c.mu.Lock()
	c.held[req.Key]++
	c.mu.Unlock()
	l := shed.NewLease(c)
	l.Cost = 1
	l.Ref = &req.Key
	return l, nil
}

func (c *clientsLayer) Release(l *shed.Lease, _ shed.Outcome) {
	c.mu.Lock()
	c.held[*l.Ref.(*string)]--
	c.mu.Unlock()
}

func (c *clientsLayer) TopClients(n int) []layerkit.ClientShare {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for _, v := range c.held {
		total += v
	}
	var out []layerkit.ClientShare
	for k, v := range c.held {
		share := 0.0
		if total > 0 {
			share = float64(v) / float64(total)
		}
		out = append(out, layerkit.ClientShare{Key: k, Priority: shed.Default, InFlight: v, Share: share})
	}
	return out[:min(n, len(out))]
}

// The clients' keys, which the page must show masked.
var rawKeys = []string{"sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_51HxYzAbCdEfGhIjKlMnOpQr", "sk_live_9Zz8Yy7Xx6Ww5Vv4Uu3Tt2Ss"}

// loadServer is an API behind four layers, with the page on the same
// loopback server (a real one would serve it on an admin port). The
// worker layer's pressure is how many of the load's clients wait for an
// answer, against a capacity of 8, so that it sheds while the load runs
// and recovers when it stops.
type loadServer struct {
	*httptest.Server
	waiting atomic.Int64
	rec     *shedstatus.Recorder
}

func newLoadServer(t *testing.T) *loadServer {
	t.Helper()
	s := &loadServer{}
	rate := ratelimit.PerKey(100000, time.Second)
	inFlight, err := concurrency.New(concurrency.Config{Limit: 64, PerKey: 32, KeyBy: concurrency.KeyByClient})
	if err != nil {
		t.Fatal(err)
	}
	wc := worker.DefaultConfig()
	wc.Interval = 50 * time.Millisecond
	wc.CPU.Disable = true
	wc.SchedLatencyTarget = -1
	wc.Limit.Disable = true
	wc.Recovery = time.Second
	wc.Signals = []worker.Signal{{Name: "clients_waiting", Read: func() float64 { return float64(s.waiting.Load()) / 8 }}}
	busy, err := worker.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	layers := []shed.Layer{rate, inFlight, &clientsLayer{held: map[string]int64{}}, busy}
	s.rec, err = shedstatus.New(shedstatus.Config{Layers: layers, Every: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: s.rec})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := shedhttp.New(chain, shedhttp.Config{
		Key:        shedhttp.KeyHeader("X-API-Key"),
		Priorities: shedhttp.RoutePriorities{"POST /v1/charges": shed.Critical, "/v1/reports": shed.Sheddable},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(statuspage.Path, statuspage.New(s.rec, statuspage.Options{Title: "payments API"}))
	api := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "ok\n")
	}))
	for _, route := range []string{"POST /v1/charges", "GET /v1/charges", "GET /v1/reports"} {
		mux.Handle(route, api)
	}
	s.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.Close()
		s.rec.Close()
		chain.Close()
	})
	return s
}

// flood runs clients in closed loops against the API until ctx ends: a
// mix of critical, default and sheddable requests from three clients.
func (s *loadServer) flood(ctx context.Context, clients int) *sync.WaitGroup {
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				method, path := http.MethodGet, "/v1/reports"
				switch n := rng.IntN(10); {
				case n < 2:
					method, path = http.MethodPost, "/v1/charges"
				case n < 5:
					path = "/v1/charges"
				}
				req, _ := http.NewRequestWithContext(ctx, method, s.URL+path, nil)
				req.Header.Set("X-API-Key", rawKeys[rng.IntN(len(rawKeys))])
				s.waiting.Add(1)
				resp, err := hc.Do(req)
				s.waiting.Add(-1)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if resp != nil && resp.StatusCode != http.StatusOK {
					time.Sleep(2 * time.Millisecond) // as a client told to back off
				}
			}
		}()
	}
	return &wg
}

func (s *loadServer) snapshot(t *testing.T) (shedstatus.Snapshot, string) {
	t.Helper()
	resp, err := http.Get(s.URL + statuspage.Path + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var snap shedstatus.Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatalf("the JSON form: %v\n%s", err, b)
	}
	return snap, string(b)
}

// pageState is what the test reads of the page in the browser.
type pageState struct {
	Layers  []string                     `json:"layers"`
	Figures map[string]map[string]string `json:"figures"` // layer → data-figure → text
	Totals  map[string]map[string]string `json:"totals"`  // layer → "priority/kind" → text
	Clients []string                     `json:"clients"`
	Rejects int                          `json:"rejects"`
	HTML    string                       `json:"html"`
	Live    string                       `json:"live"`
}

const readPage = `(() => {
  const out = {layers: [], figures: {}, totals: {}, clients: [], rejects: 0,
    html: document.documentElement.outerHTML, live: document.getElementById("live").textContent};
  for (const s of document.querySelectorAll("section.layer")) {
    const name = s.getAttribute("data-layer");
    out.layers.push(name);
    out.figures[name] = {};
    for (const f of s.querySelectorAll("[data-figure]")) out.figures[name][f.getAttribute("data-figure")] = f.textContent.trim();
    out.totals[name] = {};
    for (const r of s.querySelectorAll("tr[data-priority]"))
      for (const c of r.querySelectorAll("[data-total]"))
        out.totals[name][r.getAttribute("data-priority") + "/" + c.getAttribute("data-total")] = c.textContent.trim();
    for (const c of s.querySelectorAll("table.clients code")) out.clients.push(c.textContent.trim());
  }
  out.rejects = document.querySelectorAll("#rejections tr").length;
  return out;
})()`

func TestPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	exe := chromium(t)
	srv := newLoadServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	defer cancelAlloc()
	var mu sync.Mutex
	var consoleErrors []string
	// Console calls, uncaught exceptions and the browser's own log (a
	// failed request, a refused script or style) count as errors.
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *cdpruntime.EventConsoleAPICalled:
			if ev.Type == cdpruntime.ConsoleAPICalledTypeError || ev.Type == cdpruntime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, a.Description+fmt.Sprint(a.Value))
				}
				consoleErrors = append(consoleErrors, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *cdpruntime.EventExceptionThrown:
			consoleErrors = append(consoleErrors, fmt.Sprintf("exception: %s (line %d)", ev.ExceptionDetails.Text, ev.ExceptionDetails.LineNumber))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				consoleErrors = append(consoleErrors, fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithListener(listen))
	defer cancelBrowser()

	errorsSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), consoleErrors...)
	}
	read := func() pageState {
		t.Helper()
		st, err := chromedp.Run(browser, chromedp.Evaluate[pageState](readPage))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return st
	}
	// waitFor reads the page until ok says so, at most for d.
	waitFor := func(what string, d time.Duration, ok func(pageState) bool) pageState {
		t.Helper()
		end := time.Now().Add(d)
		for {
			st := read()
			if ok(st) {
				return st
			}
			if time.Now().After(end) {
				t.Fatalf("waited %s for %s; the page reads %+v", d, what, struct {
					Layers  []string
					Figures map[string]map[string]string
					Totals  map[string]map[string]string
					Live    string
				}{st.Layers, st.Figures, st.Totals, st.Live})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The page loads, with no error, and shows every layer of the chain.
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+statuspage.Path),
		chromedp.WaitVisible(chromedp.CSS("#main section.layer"))); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	st := waitFor("the script to go live", 10*time.Second, func(st pageState) bool { return st.Live == "live" })
	if want := []string{"ratelimit", "concurrency", "clients", "worker"}; strings.Join(st.Layers, ",") != strings.Join(want, ",") {
		t.Fatalf("layers shown %v, want %v", st.Layers, want)
	}
	before := st.Figures["ratelimit"]["admitted"]

	// Under load the figures move and the worker layer sheds.
	loadCtx, stopLoad := context.WithTimeout(ctx, 30*time.Second)
	defer stopLoad()
	load := srv.flood(loadCtx, 24)
	num := func(s string) float64 { v, _ := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64); return v }
	st = waitFor("the worker layer to shed, on the page", 20*time.Second, func(st pageState) bool {
		return st.Figures["ratelimit"]["admitted"] != before && num(st.Figures["ratelimit"]["admitted"]) > 0 &&
			num(st.Figures["worker"]["shed_level"]) > 0 && num(st.Figures["worker"]["shed"]) > 0 && st.Rejects > 1
	})
	moving := st.Figures["ratelimit"]["admitted"]
	st = waitFor("the figures to change again", 10*time.Second, func(st pageState) bool {
		return st.Figures["ratelimit"]["admitted"] != moving
	})
	if len(st.Clients) == 0 {
		t.Error("the clients layer's clients are not shown")
	}
	for _, c := range st.Clients {
		if !strings.HasPrefix(c, "#") {
			t.Errorf("client shown as %q, want a mask", c)
		}
	}
	if *screenshot != "" {
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.MkdirAll(filepath.Dir(*screenshot), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s", *screenshot)
	}
	stopLoad()
	load.Wait()

	// With the load stopped the totals hold still (once the requests
	// still in the server are done): the page shows the JSON form's
	// figures once it has refreshed.
	totalsOf := func(s shedstatus.Snapshot) map[string]map[string]string {
		m := map[string]map[string]string{}
		for _, l := range s.Layers {
			m[l.Name] = map[string]string{}
			for _, p := range l.Priorities {
				m[l.Name][p.Priority+"/admitted"] = strconv.FormatUint(p.AdmittedTotal, 10)
				m[l.Name][p.Priority+"/shed"] = strconv.FormatUint(p.ShedTotal, 10)
			}
		}
		return m
	}
	var raw string
	var want map[string]map[string]string
	st = waitFor("the page to show the JSON form's totals", 10*time.Second, func(st pageState) bool {
		var snap shedstatus.Snapshot
		snap, raw = srv.snapshot(t)
		want = totalsOf(snap)
		return fmt.Sprint(st.Totals) == fmt.Sprint(want)
	})
	if want["worker"]["sheddable/shed"] == "0" || want["ratelimit"]["critical/admitted"] == "0" || want["worker"]["critical/shed"] != "0" {
		t.Errorf("the load did not reach the layers as it should: %v", want)
	}

	// A masked key never appears raw, on the page or in the JSON.
	for _, k := range rawKeys {
		if strings.Contains(st.HTML, k) || strings.Contains(raw, k) {
			t.Errorf("raw key %s shown", k)
		}
	}
	if errs := errorsSoFar(); len(errs) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(errs, "\n"))
	}
}
