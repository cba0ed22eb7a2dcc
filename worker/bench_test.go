package worker

import (
	"context"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

// The request path of the layer as a service runs it, through a chain of
// this layer alone: Acquire, the work (nothing), Release; nothing shed.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"default", DefaultConfig()},
		{"workers", Config{Interval: DefaultInterval, Workers: 1 << 20}},
	} {
		cfg := bc.cfg
		cfg.CPU.Disable, cfg.SchedLatencyTarget = true, -1
		l, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{l}})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		req := shed.Request{Priority: shed.Default}
		work := func(context.Context) error { return nil }
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := chain.Do(ctx, req, work); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := chain.Do(ctx, req, work); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		l.Close()
	}
}
