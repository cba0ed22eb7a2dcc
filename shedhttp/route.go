package shedhttp

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/loadshed/loadshed/shed"

	"github.com/go-chi/chi/v5"
)

// RoutePriorities annotates routes with priorities. A key is a route
// pattern as the router spells it ("/v1/charges/{id}"), optionally after a
// method ("POST /v1/charges"); a pattern ending in "/*" covers every route
// below it ("/v1/reports/*" covers "/v1/reports" and "/v1/reports/{id}").
//
// The most specific annotation wins: an exact pattern before a "/*" one, a
// longer "/*" prefix before a shorter one, and, for the same pattern, one
// with the request's method before one without. Routes no key covers get
// Config.DefaultPriority.
//
// Because the key is the pattern, not the path, a shedder mounted with chi's
// r.Use (before chi has routed) finds the route itself, with the router's
// own matching, to look its annotation up.
type RoutePriorities map[string]shed.Priority

// ParseRoutePriorities builds RoutePriorities from priority words
// ("critical", "default", "sheddable", "test-mode"), as a configuration
// file holds them. An unknown word or a malformed key is an error naming it.
func ParseRoutePriorities(words map[string]string) (RoutePriorities, error) {
	rp := make(RoutePriorities, len(words))
	for k, w := range words {
		p, err := shed.ParsePriority(w)
		if err != nil {
			return nil, fmt.Errorf("shedhttp: route %q: %w", k, err)
		}
		rp[k] = p
	}
	if _, err := compileRoutes(rp, shed.Default, "RoutePriorities"); err != nil {
		return nil, err
	}
	return rp, nil
}

// Prioritize returns middleware that gives every request passing through it
// priority p (WithPriority), for a shedder mounted after it on the same
// route or group:
//
//	r.With(shedhttp.Prioritize(shed.Critical), shedder).Post("/v1/charges", h)
//
// A priority in the context wins over RoutePriorities. An invalid p leaves
// requests as they are. With the shedder mounted by r.Use at the top,
// Prioritize on a route comes too late: annotate with RoutePriorities.
func Prioritize(p shed.Priority) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if !p.Valid() {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(shed.WithPriority(r.Context(), p)))
		})
	}
}

// The standard methods, indexed for per-method tables.
var stdMethods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

const numMethods = len(stdMethods)

func methodIndex(m string) int {
	switch m {
	case http.MethodGet:
		return 0
	case http.MethodHead:
		return 1
	case http.MethodPost:
		return 2
	case http.MethodPut:
		return 3
	case http.MethodPatch:
		return 4
	case http.MethodDelete:
		return 5
	case http.MethodConnect:
		return 6
	case http.MethodOptions:
		return 7
	case http.MethodTrace:
		return 8
	}
	return -1
}

type ruleSet struct {
	any     shed.Priority
	hasAny  bool
	methods map[string]shed.Priority
}

func (s *ruleSet) lookup(method string) (shed.Priority, bool) {
	if p, ok := s.methods[method]; ok {
		return p, true
	}
	return s.any, s.hasAny
}

type prefixRule struct {
	prefix string // "/v1/reports" for "/v1/reports/*"; "" for "/*"
	set    *ruleSet
}

// routeRules is RoutePriorities compiled for lookup.
type routeRules struct {
	exact    map[string]*ruleSet
	prefixes []prefixRule // longest first
	def      shed.Priority
}

func compileRoutes(rp RoutePriorities, def shed.Priority, field string) (*routeRules, error) {
	if def != shed.Unset && !def.Valid() {
		return nil, fmt.Errorf("shedhttp: Config.DefaultPriority: invalid priority %d", int8(def))
	}
	rr := &routeRules{exact: map[string]*ruleSet{}, def: def.Resolve()}
	byPrefix := map[string]*ruleSet{}
	keys := make([]string, 0, len(rp))
	for k := range rp {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic errors
	for _, k := range keys {
		p := rp[k]
		if !p.Valid() {
			return nil, fmt.Errorf("shedhttp: %s[%q]: invalid priority %d", field, k, int8(p))
		}
		method, pattern, err := splitRouteKey(k)
		if err != nil {
			return nil, fmt.Errorf("shedhttp: %s[%q]: %w", field, k, err)
		}
		var set *ruleSet
		if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
			if set = byPrefix[prefix]; set == nil {
				set = &ruleSet{}
				byPrefix[prefix] = set
			}
		} else {
			if set = rr.exact[pattern]; set == nil {
				set = &ruleSet{}
				rr.exact[pattern] = set
			}
		}
		if method == "" {
			set.any, set.hasAny = p, true
		} else {
			if set.methods == nil {
				set.methods = map[string]shed.Priority{}
			}
			set.methods[method] = p
		}
	}
	for prefix, set := range byPrefix {
		rr.prefixes = append(rr.prefixes, prefixRule{prefix: prefix, set: set})
	}
	sort.Slice(rr.prefixes, func(i, j int) bool { return len(rr.prefixes[i].prefix) > len(rr.prefixes[j].prefix) })
	return rr, nil
}

func splitRouteKey(k string) (method, pattern string, err error) {
	k = strings.TrimSpace(k)
	if i := strings.IndexAny(k, " \t"); i >= 0 {
		method, pattern = k[:i], strings.TrimSpace(k[i+1:])
		for j := 0; j < len(method); j++ {
			if c := method[j]; c < 'A' || c > 'Z' {
				return "", "", fmt.Errorf("method %q must be upper-case letters", method)
			}
		}
	} else {
		pattern = k
	}
	if pattern == "" || pattern[0] != '/' {
		return "", "", fmt.Errorf("pattern %q must begin with '/'", pattern)
	}
	if strings.ContainsAny(pattern, " \t") {
		return "", "", fmt.Errorf("pattern %q must not hold spaces", pattern)
	}
	return method, pattern, nil
}

// lookup returns the priority annotated for method and pattern; "" is the
// pattern of a request no route matched.
func (rr *routeRules) lookup(method, pattern string) shed.Priority {
	if pattern == "" {
		return rr.def
	}
	if s := rr.exact[pattern]; s != nil {
		if p, ok := s.lookup(method); ok {
			return p
		}
	}
	for _, pr := range rr.prefixes {
		if covers(pr.prefix, pattern) {
			if p, ok := pr.set.lookup(method); ok {
				return p
			}
		}
	}
	return rr.def
}

// covers reports whether the "/*" annotation for prefix covers pattern.
func covers(prefix, pattern string) bool {
	if !strings.HasPrefix(pattern, prefix) {
		return false
	}
	rest := pattern[len(prefix):]
	return rest == "" || rest[0] == '/'
}

// routeInfo is what one route pattern resolves to, per standard method.
type routeInfo struct {
	route [numMethods]string // "POST /v1/charges"
	prio  [numMethods]shed.Priority
}

// maxCachedRoutes bounds the route cache. Patterns come from the router, so
// they are few; the bound only guards against an unexpected source.
const maxCachedRoutes = 4096

// routeTable resolves (method, pattern) to the Request.Route string and the
// annotated priority without allocating, through a copy-on-write cache that
// readers never lock.
type routeTable struct {
	rules *routeRules
	mu    sync.Mutex
	cache atomic.Pointer[map[string]*routeInfo]
}

func (t *routeTable) resolve(method, pattern string) (route string, prio shed.Priority) {
	if pattern == "" {
		return "", t.rules.def
	}
	mi := methodIndex(method)
	if mi < 0 {
		// chi routes custom methods too; they are rare, so build the answer.
		return method + " " + pattern, t.rules.lookup(method, pattern)
	}
	if m := t.cache.Load(); m != nil {
		if ri := (*m)[pattern]; ri != nil {
			return ri.route[mi], ri.prio[mi]
		}
	}
	ri := &routeInfo{}
	for i, m := range stdMethods {
		ri.route[i] = m + " " + pattern
		ri.prio[i] = t.rules.lookup(m, pattern)
	}
	t.mu.Lock()
	old := t.cache.Load()
	if old == nil || len(*old) < maxCachedRoutes {
		next := make(map[string]*routeInfo, 1+lenOf(old))
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[pattern] = ri
		t.cache.Store(&next)
	}
	t.mu.Unlock()
	return ri.route[mi], ri.prio[mi]
}

func lenOf(m *map[string]*routeInfo) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// chiContexts recycles the routing contexts used to look routes up before
// chi routes the request.
var chiContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// routePattern returns the pattern of the route r will reach ("" when none
// matches). Once chi has routed r (the shedder is mounted with r.With or
// inside a route's group), chi's pattern is used. Before (mounted with
// r.Use), the route is found with the router's own matching, from the root
// router, so that routes of mounted sub-routers get their full pattern.
// Without chi, r.Pattern (net/http's ServeMux) is used, less any method.
func routePattern(r *http.Request, routes chi.Routes) string {
	rctx := chi.RouteContext(r.Context())
	path := ""
	if rctx != nil {
		if n := len(rctx.RoutePatterns); n > 0 {
			if last := rctx.RoutePatterns[n-1]; r.Pattern != "" && !strings.HasSuffix(last, "*") {
				return r.Pattern // routed to an endpoint
			}
			// Inside a mounted sub-router: its path is relative, so look
			// the whole path up from the root.
		} else {
			path = rctx.RoutePath
		}
		if rctx.Routes != nil {
			routes = rctx.Routes
		}
	}
	if routes == nil {
		p := r.Pattern
		if i := strings.IndexByte(p, ' '); i >= 0 {
			p = strings.TrimSpace(p[i+1:])
		}
		return p
	}
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if path == "" {
			path = "/"
		}
	}
	if path[0] != '/' {
		return "" // "OPTIONS *" and the like match no route
	}
	fc := chiContexts.Get().(*chi.Context)
	fc.Reset()
	p := routes.Find(fc, r.Method, path)
	fc.Reset()
	chiContexts.Put(fc)
	return p
}
