package shedhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shedhttp"
)

// A per-client rate limit and in-flight cap on a chi router.
func ExampleLimit() {
	limit := shedhttp.Limit(
		ratelimit.PerKey(2, time.Minute), // 2 requests a minute per client
		concurrency.PerKey(10),           // 10 in flight per client
	)
	defer limit.Close() // stops the layers' sweepers once the router is done with
	r := chi.NewRouter()
	r.Use(limit)
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d %s retry-after=%q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-key";r=1;t=30, "in-flight-per-key";r=9 retry-after=""
	// 200 "per-key";r=0;t=30, "in-flight-per-key";r=9 retry-after=""
	// 429 "per-key";r=0;t=30 retry-after="30"
}
