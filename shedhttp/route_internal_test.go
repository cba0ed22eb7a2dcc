package shedhttp

import (
	"fmt"
	"sync"
	"testing"

	"github.com/loadshed/loadshed/internal/ratefield"
	"github.com/loadshed/loadshed/shed"
)

func TestRouteRulesPrecedence(t *testing.T) {
	rr, err := compileRoutes(RoutePriorities{
		"/v1/*":              shed.Sheddable,
		"/v1/charges/*":      shed.Default,
		"POST /v1/charges/*": shed.Critical,
		"/v1/charges":        shed.TestMode,
		"GET /v1/charges":    shed.Sheddable,
		"/*":                 shed.Default,
	}, shed.TestMode, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, pattern string
		want            shed.Priority
	}{
		{"GET", "/v1/charges", shed.Sheddable},            // exact, with the method
		{"PUT", "/v1/charges", shed.TestMode},             // exact, any method
		{"POST", "/v1/charges/{id}", shed.Critical},       // longest prefix, with the method
		{"GET", "/v1/charges/{id}/refunds", shed.Default}, // longest prefix, any method
		{"GET", "/v1/chargesx", shed.Sheddable},           // "/v1/charges/*" does not cover a longer segment
		{"GET", "/v1", shed.Sheddable},                    // a prefix covers its own root
		{"GET", "/v2/things", shed.Default},               // "/*"
		{"GET", "", shed.TestMode},                        // no route: the default
	} {
		if got := rr.lookup(tc.method, tc.pattern); got != tc.want {
			t.Errorf("%s %s = %v, want %v", tc.method, tc.pattern, got, tc.want)
		}
	}
}

func TestRouteTableCachesAndBounds(t *testing.T) {
	rr, _ := compileRoutes(RoutePriorities{"POST /a": shed.Critical}, shed.Default, "test")
	tab := &routeTable{rules: rr}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				tab.resolve("GET", fmt.Sprintf("/p/%d", i))
				if route, p := tab.resolve("POST", "/a"); route != "POST /a" || p != shed.Critical {
					t.Errorf("POST /a = %q %v", route, p)
				}
			}
		}(g)
	}
	wg.Wait()
	if route, p := tab.resolve("PURGE", "/a"); route != "PURGE /a" || p != shed.Default {
		t.Errorf("custom method: %q %v", route, p)
	}
	if allocs := testing.AllocsPerRun(100, func() { tab.resolve("POST", "/a") }); allocs != 0 {
		t.Errorf("a cached route allocates %v times", allocs)
	}
	for i := 0; i < maxCachedRoutes+10; i++ {
		tab.resolve("GET", fmt.Sprintf("/q/%d", i))
	}
	if n := len(*tab.cache.Load()); n > maxCachedRoutes {
		t.Errorf("cache grew to %d entries, bound %d", n, maxCachedRoutes)
	}
}

func TestAppendSFStringAndJSON(t *testing.T) {
	if got := string(ratefield.AppendString(nil, "a\"b\\c\x01é")); got != `"a\"b\\c???"` {
		t.Errorf("sf-string = %s", got)
	}
	if got := string(ratefield.AppendString(nil, "")); got != `"default"` {
		t.Errorf("empty sf-string = %s", got)
	}
	if got := string(appendJSONString(nil, "a\"<\n\xffé\u2028")); got != `"a\"\u003c\n\ufffdé\u2028"` {
		t.Errorf("json = %s", got)
	}
	if got := string(ratefield.AppendInt(nil, 1<<62)); got != "999999999999999" {
		t.Errorf("sf-integer clamp = %s", got)
	}
}
