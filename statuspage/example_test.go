package statuspage_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedstatus"
	"github.com/loadshed/loadshed/shedhttp"
	"github.com/loadshed/loadshed/statuspage"
)

// The page reads the chain's observer, a shedstatus.Recorder, and is
// served on an admin mux, apart from the API.
func ExampleNew() {
	layers := []shed.Layer{concurrency.PerKey(10)}
	rec, err := shedstatus.New(shedstatus.Config{Layers: layers})
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()
	chain, err := shed.NewChain(shed.Config{Layers: layers, Observer: rec})
	if err != nil {
		log.Fatal(err)
	}
	api := http.NewServeMux()
	api.Handle("/", shedhttp.MustNew(chain, shedhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	admin := http.NewServeMux() // serve it on an admin port or behind auth
	admin.Handle(statuspage.Path, statuspage.New(rec, statuspage.Options{Title: "payments"}))

	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", statuspage.Path+"?format=json", nil))
	fmt.Println(w.Code, strings.Contains(w.Body.String(), `"name":"concurrency`))
	// Output: 200 true
}
