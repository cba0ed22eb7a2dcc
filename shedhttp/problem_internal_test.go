package shedhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

// A document kept for a (status, detail) pair is the one built for it, a
// pair seen again gets the same one, and once the cache is full the pairs
// it does not hold are still answered in full, built per request.
func TestProblemDocsAreTheBuiltOnesAndBounded(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * len(problemDocs) {
				writeProblem(httptest.NewRecorder(), http.StatusServiceUnavailable, fmt.Sprintf("reason %d", i), nil)
			}
		}()
	}
	wg.Wait()
	for i := range 3 * len(problemDocs) {
		detail := fmt.Sprintf("reason <%d> \"x\"", i)
		rec := httptest.NewRecorder()
		writeProblem(rec, http.StatusServiceUnavailable, detail, nil)
		want := string(appendProblem(nil, http.StatusServiceUnavailable, detail, nil))
		if got := rec.Body.String(); got != want {
			t.Fatalf("%q: body %q, want %q", detail, got, want)
		}
		if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(want)) {
			t.Errorf("%q: Content-Length %q, want %d", detail, got, len(want))
		}
		var doc struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Status != 503 || doc.Detail != detail {
			t.Errorf("%q: document %+v (%v)", detail, doc, err)
		}
		if d := cachedProblem(http.StatusServiceUnavailable, detail, nil); d != nil {
			t.Errorf("%q: kept beyond the cache's %d documents", detail, len(problemDocs))
		}
	}
	held := 0
	for i := range problemDocs {
		d := problemDocs[i].Load()
		if d == nil {
			t.Fatalf("slot %d empty after %d distinct pairs", i, 3*len(problemDocs))
		}
		if again := cachedProblem(d.status, d.detail, nil); again != d {
			t.Errorf("(%d, %q) seen again got another document", d.status, d.detail)
		}
		if string(d.body) != string(appendProblem(nil, d.status, d.detail, nil)) {
			t.Errorf("(%d, %q): kept body %q is not the built one", d.status, d.detail, d.body)
		}
		held++
	}
	if held != len(problemDocs) {
		t.Errorf("%d documents held, want %d", held, len(problemDocs))
	}
	if d := cachedProblem(http.StatusTooManyRequests, "over", []shed.Quota{{Policy: "p"}}); d != nil {
		t.Error("a document naming policies was kept")
	}
}
