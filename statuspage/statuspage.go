// Package statuspage serves a live view of a chain's layers: one HTML page,
// rendered on the server, with its style and a small script embedded (no
// framework, nothing fetched from elsewhere, so it works offline and
// behind a firewall), updating about once a second; the same data as JSON
// at ?format=json. It reads a shedstatus.Recorder, the chain's observer.
//
//	rec, err := shedstatus.New(shedstatus.Config{Layers: layers})
//	...
//	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: rec})
//	...
//	admin := http.NewServeMux()
//	admin.Handle("/debug/loadshed", statuspage.New(rec, statuspage.Options{}))
//	go http.ListenAndServe("127.0.0.1:6060", admin) // an admin port, not the public one
//
// The page is read-only (it answers GET and HEAD only) and shows clients'
// keys masked unless the Recorder shows them, but it still tells who is
// being shed and how the service is doing: serve it on an admin port or
// behind authentication, as /debug/pprof is.
package statuspage

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/loadshed/loadshed/shed/shedstatus"
)

// Path is where a service mounts the page by convention.
const Path = "/debug/loadshed"

//go:embed page.html
var pageTemplate string

//go:embed page.css
var pageCSS string

//go:embed page.js
var pageJS string

var (
	tmpl = template.Must(template.New("statuspage").Funcs(template.FuncMap{
		"num": num, "rate": rate, "pct": pct,
	}).Parse(pageTemplate))
	// The page allows only its own style and script, by their digests,
	// and requests to its own origin.
	csp = "default-src 'none'; style-src '" + digest(pageCSS) + "'; script-src '" + digest(pageJS) +
		"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// Options configure the page.
type Options struct {
	// Title names the service in the page's heading (default "loadshed").
	Title string
}

// Handler serves the page. Requests: GET (the HTML page), GET
// ?format=json (the shedstatus.Snapshot as JSON; &since=T, T in Unix
// milliseconds, limits the history to the points after T), and GET
// ?part=main (the page's changing part, which its script fetches).
type Handler struct {
	rec   *shedstatus.Recorder
	title string
}

// New returns the page of rec.
func New(rec *shedstatus.Recorder, opts Options) *Handler {
	if opts.Title == "" {
		opts.Title = "loadshed"
	}
	return &Handler{rec: rec, title: opts.Title}
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ServeHTTP answers GET and HEAD; anything else is refused, as the page
// changes nothing.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the status page is read-only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufs.Put(buf)
	switch {
	case q.Get("format") == "json":
		var since time.Time
		if s := q.Get("since"); s != "" {
			ms, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				http.Error(w, "since: want Unix milliseconds", http.StatusBadRequest)
				return
			}
			since = time.UnixMilli(ms)
		}
		if err := json.NewEncoder(buf).Encode(h.rec.Snapshot(since)); err != nil {
			http.Error(w, "encoding the snapshot: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hdr.Set("Content-Type", "application/json")
	case q.Get("part") == "main":
		if err := tmpl.ExecuteTemplate(buf, "main", h.view()); err != nil {
			http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hdr.Set("Content-Type", "text/html; charset=utf-8")
	default:
		if err := tmpl.ExecuteTemplate(buf, "page", h.view()); err != nil {
			http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hdr.Set("Content-Type", "text/html; charset=utf-8")
		hdr.Set("Content-Security-Policy", csp)
		hdr.Set("X-Frame-Options", "DENY")
	}
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(buf.Bytes())
}
