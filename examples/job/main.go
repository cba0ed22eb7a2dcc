// Command job runs work outside HTTP through a loadshed chain: the same
// layers that guard the API guard background jobs, with shed.Chain.Do.
//
//	go run ./examples/job
//
// Twelve jobs of one tenant arrive one after another while the first ones
// still run. The rate limit allows ten per minute, and at most three may run
// at a time: three run, and the nine the concurrency layer turns away are
// told when to come back instead of piling onto the service. Their rate
// tokens are given back (the jobs never ran), so the tenant's quota is
// charged only for the work that happened: the last two jobs are turned
// away for the in-flight limit, not for the quota that nine refusals would
// have spent.
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

	// Every job that runs holds its slot until all twelve have been
	// decided, so that the in-flight limit shows; each job arrives once the
	// one before it runs or has been turned away (its token given back).
	release := make(chan struct{})
	results := make([]string, 12)
	var done sync.WaitGroup
	for i := range results {
		decided := make(chan struct{})
		done.Add(1)
		go func() {
			defer done.Done()
			ran := false
			err := chain.Do(context.Background(), shed.Request{Key: "tenant-42", Priority: shed.Sheddable},
				func(ctx context.Context) error {
					ran = true
					close(decided)
					<-release
					return nil
				})
			if !ran {
				close(decided)
			}
			var rej *shed.Rejection
			switch {
			case errors.As(err, &rej):
				results[i] = fmt.Sprintf("rejected by %s (%d): %s, retry after %v", rej.Layer, rej.Status, rej.Reason, rej.RetryAfter.Round(time.Second))
			case err != nil:
				results[i] = "failed: " + err.Error()
			case ran:
				results[i] = "ran"
			}
		}()
		<-decided
	}
	close(release)
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
