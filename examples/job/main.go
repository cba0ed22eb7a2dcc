// Command job runs work outside HTTP through a loadshed chain: the same
// layers that guard the API guard background jobs, with shed.Chain.Do.
//
//	go run ./examples/job
//
// Twelve jobs of one tenant arrive at once. The rate limit allows ten per
// minute, and at most three may run at a time: three run, and the nine the
// concurrency layer turns away are told when to come back instead of piling
// onto the service. Their rate tokens are given back (the jobs never ran),
// so the tenant's quota is charged only for the work that happened.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "job:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	perKey, err := ratelimit.NewMemory(ratelimit.TokenBucket, ratelimit.PerMinute(10), ratelimit.MemoryConfig{})
	if err != nil {
		return err
	}
	defer perKey.Close()
	rate, err := ratelimit.New(ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "per-key", Descriptors: []ratelimit.Descriptor{ratelimit.ByClient}, Store: perKey},
	}})
	if err != nil {
		return err
	}
	defer rate.Close()
	inFlight, err := concurrency.New(concurrency.Config{Limit: 256, PerKey: 3, KeyBy: concurrency.KeyByClient})
	if err != nil {
		return err
	}
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{rate, inFlight}})
	if err != nil {
		return err
	}

	// Every job holds its slot until all twelve have asked, so that the
	// in-flight limit shows.
	var asked sync.WaitGroup
	asked.Add(12)
	release := make(chan struct{})
	go func() { asked.Wait(); close(release) }()

	results := make([]string, 12)
	var done sync.WaitGroup
	for i := range results {
		done.Add(1)
		go func() {
			defer done.Done()
			ran := false
			err := chain.Do(context.Background(), shed.Request{Key: "tenant-42", Priority: shed.Sheddable},
				func(ctx context.Context) error {
					ran = true
					asked.Done()
					<-release
					return nil
				})
			var rej *shed.Rejection
			switch {
			case errors.As(err, &rej):
				asked.Done()
				results[i] = fmt.Sprintf("rejected by %s (%d): %s, retry after %v", rej.Layer, rej.Status, rej.Reason, rej.RetryAfter.Round(time.Second))
			case err != nil:
				results[i] = "failed: " + err.Error()
			case ran:
				results[i] = "ran"
			}
		}()
	}
	done.Wait()

	counts := map[string]int{}
	for _, r := range results {
		counts[r]++
	}
	for _, r := range results {
		if n, ok := counts[r]; ok {
			fmt.Fprintf(out, "%2d × %s\n", n, r)
			delete(counts, r)
		}
	}
	return nil
}
