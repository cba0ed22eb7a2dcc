package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shed"
)

func try(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadshed try", flag.ContinueOnError)
	fs.SetOutput(stderr)
	key := fs.String("key", "", "the client's key: the header's value or the bearer token, as the file's http.key says; where the file keys clients by IP, an IP address is the client's, any other word the key itself")
	route := fs.String("route", "", "the route, as a method and a pattern: 'GET /v1/charges/{id}'")
	prio := fs.String("priority", "", "the request's priority (default: the file's route priorities decide): critical, default, sheddable, test-mode")
	n := fs.Int("n", 10, "how many requests to send, one after another")
	every := fs.Duration("every", 0, "how long to wait between requests")
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if file == "" && fs.NArg() > 0 {
		file = fs.Arg(0)
	}
	if file == "" || *key == "" || *route == "" || *n < 1 {
		fmt.Fprint(stderr, "loadshed try: need FILE, --key, --route, and --n of at least 1\n", usage)
		return 2
	}
	method, pattern, ok := strings.Cut(strings.TrimSpace(*route), " ")
	pattern = strings.TrimSpace(pattern)
	if !ok || !strings.HasPrefix(pattern, "/") {
		fmt.Fprintf(stderr, "loadshed try: --route %q: want a method and a pattern, 'GET /v1/x'\n", *route)
		return 2
	}
	opts := options()
	opts.MemoryOnly = true
	if _, err := netip.ParseAddr(*key); err != nil {
		// A file that keys clients by IP keeps this base key (one with a
		// header or bearer key replaces it): --key is then the key as it
		// is, so that any word names a client.
		k := *key
		opts.HTTP.Key = func(*http.Request) (string, error) { return k, nil }
	}
	if *prio != "" {
		p, err := shed.ParsePriority(*prio)
		if err != nil {
			fmt.Fprintf(stderr, "loadshed try: --priority: %v\n", err)
			return 2
		}
		opts.HTTP.Priority = func(*http.Request, shed.Priority) shed.Priority { return p }
	}
	var events []shed.Event
	opts.Observer = shed.ObserverFunc(func(e shed.Event) {
		if e.Kind != shed.Released {
			events = append(events, e)
		}
	})
	b, err := config.Load(file, opts)
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			fmt.Fprintf(stderr, "%v\n%s: %d error%s\n", err, file, len(es), plural(len(es)))
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	defer b.Close()
	r := chi.NewRouter()
	r.Use(b.Middleware())
	r.MethodFunc(method, pattern, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	path := examplePath(pattern)
	shown := method + " " + path
	if path != pattern {
		shown += " (route " + pattern + ")"
	}
	fmt.Fprintf(stdout, "%d × %s, key %q, in memory\n", *n, shown, *key)
	for _, l := range b.File.Layers {
		if l.Fleet != nil {
			fmt.Fprintln(stdout, "(the fleet layer is left out: it has no meaning without the shared Redis)")
			break
		}
	}
	fmt.Fprintln(stdout)
	counts := map[int]int{}
	for i := 1; i <= *n; i++ {
		if i > 1 && *every > 0 {
			time.Sleep(*every)
		}
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.1:1234"
		switch b.File.HTTP.Key.From {
		case config.Header:
			req.Header.Set(b.File.HTTP.Key.Header, *key)
		case config.Bearer:
			req.Header.Set("Authorization", "Bearer "+*key)
		default:
			// Keyed by client IP: an address is the client's, any other
			// key stands for one (opts.HTTP.Key, set above).
			if a, err := netip.ParseAddr(*key); err == nil {
				req.RemoteAddr = netip.AddrPortFrom(a, 1234).String()
			}
		}
		rec := httptest.NewRecorder()
		events = events[:0]
		r.ServeHTTP(rec, req)
		counts[rec.Code]++
		fmt.Fprintf(stdout, "#%-3d %d %s\n", i, rec.Code, http.StatusText(rec.Code))
		printDecisions(stdout, method+" "+pattern, events)
		printHeaders(stdout, rec.Header())
		if rec.Code >= 400 {
			if detail := problemDetail(rec.Body.String()); detail != "" {
				fmt.Fprintf(stdout, "     %s\n", detail)
			}
		}
	}
	codes := make([]int, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d × %d", counts[c], c))
	}
	fmt.Fprintf(stdout, "\n%s\n", strings.Join(parts, ", "))
	return 0
}

var param = regexp.MustCompile(`\{[^}]*\}`)

// examplePath turns a route pattern into a path it matches.
func examplePath(pattern string) string {
	p := param.ReplaceAllString(pattern, "1")
	if strings.HasSuffix(p, "/*") {
		p = strings.TrimSuffix(p, "*") + "x"
	}
	return p
}

func printHeaders(w io.Writer, h http.Header) {
	names := make([]string, 0, len(h))
	for k := range h {
		if k == "Content-Type" || k == "X-Content-Type-Options" || k == "Content-Length" {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(w, "     %s: %s\n", k, v)
		}
	}
}

var detailField = regexp.MustCompile(`"detail":\s*"((?:[^"\\]|\\.)*)"`)

func problemDetail(body string) string {
	if m := detailField.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// printDecisions shows what each layer said, and the request as they saw it.
func printDecisions(w io.Writer, route string, events []shed.Event) {
	if len(events) == 0 {
		return
	}
	var said []string
	for _, e := range events {
		d := e.Layer + " " + e.Kind.String()
		if e.Policy != "" && e.Kind != shed.Admitted {
			d += " (" + e.Policy + ")"
		}
		if e.Over {
			d += " over its limit"
		}
		said = append(said, d)
	}
	fmt.Fprintf(w, "     priority %s, route %s: %s\n", events[0].Priority, route, strings.Join(said, ", "))
}
