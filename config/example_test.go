package config_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/shed"
)

func ExampleParse() {
	file := []byte(`
layers:
  - ratelimit:
      mode: strict
      descriptors:
        - key: key
          rate_limit: {unit: fortnight, requests_per_unit: 100}
  - concurrency:
      limit: ten
`)
	_, err := config.Parse("loadshed.yaml", file, config.Options{})
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Println(e)
		}
	}
	// Output:
	// loadshed.yaml:4:13: layers[0].ratelimit.mode: unknown value "strict" (allowed: hard, soft, elastic)
	// loadshed.yaml:7:30: layers[0].ratelimit.descriptors[0].rate_limit.unit: unknown value "fortnight" (allowed: second, minute, hour, day)
	// loadshed.yaml:9:14: layers[1].concurrency.limit: want a whole number, got "ten"
}

func ExampleBuild() {
	// The same structs a file fills, filled in Go.
	f := &config.File{
		HTTP: config.HTTP{Priorities: map[string]shed.Priority{"POST /v1/charges": shed.Critical}},
		Layers: []config.Layer{
			{RateLimit: &config.RateLimit{Descriptors: []config.Descriptor{
				{Key: "key", RateLimit: &config.Rate{Unit: config.Minute, RequestsPerUnit: 2}},
			}}},
			{Concurrency: &config.Concurrency{Limit: 64}},
		},
	}
	b, err := config.Build(f, config.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	for i := 0; i < 3; i++ {
		err := b.Chain.Do(context.Background(), shed.Request{Key: "alice"}, func(context.Context) error { return nil })
		fmt.Println(err == nil)
	}
	// Output:
	// true
	// true
	// false
}

func ExampleOpen() {
	live, err := config.Open("../examples/loadshed.yaml", config.Options{
		Headroom: shed.HeadroomFunc(func() float64 { return 1 }),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer live.Close()
	// go live.Watch(ctx) follows the file and SIGHUP until ctx ends.
	handler := live.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	_ = handler // http.ListenAndServe(addr, handler)
	applied, refused := live.Stats()
	fmt.Println(applied, refused)
	// Output: 0 0
}
