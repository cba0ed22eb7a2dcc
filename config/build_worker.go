package config

// Building a worker layer from its section: the one file to change when
// worker's API does.

import (
	"fmt"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/worker"
)

func workerConfig(w *Worker, enf shed.Enforcement) worker.Config {
	// The worker is the headroom signal; it never reads one.
	enf.Headroom = nil
	interval := w.Interval
	if interval == 0 { // omitted from the file: the documented default
		interval = worker.DefaultInterval
	}
	return worker.Config{
		Name: w.Name, Enforcement: enf,
		Interval: interval, Smoothing: w.Smoothing, ShedAt: w.ShedAt, RecoverBelow: w.RecoverBelow,
		Recovery: w.Recovery, RiseGain: w.RiseGain, ShedCritical: w.ShedCritical,
		CPU:                worker.CPUConfig{Disable: w.CPU.Disable, Budget: w.CPU.Budget, Full: w.CPU.Full},
		SchedLatencyTarget: w.SchedLatencyTarget, QueueDelayTarget: w.QueueDelayTarget,
		Workers: w.Workers, BusyWorkers: w.BusyWorkers, Yield: w.Yield, RetryAfter: w.RetryAfter,
		Limit:    worker.LimitConfig{Disable: w.Limit.Disable, Initial: w.Limit.Initial, Min: w.Limit.Min, Max: w.Limit.Max},
		Fairness: w.Fairness.build(),
	}
}

// worker builds the section's layer, or carries the previous build's over
// when the section did not change: its shed level and its sampler go on.
func (b *builder) worker(w *Worker) (*worker.Layer, error) {
	cfg := workerConfig(w, b.enforcement(&w.Enforcement))
	cfg.Clock = b.opts.Clock
	key := fmt.Sprintf("worker %+v", *w)
	v, err := b.part(key, func() (any, func() error, error) {
		l, err := worker.New(cfg)
		if err != nil {
			return nil, nil, err
		}
		return l, func() error { l.Close(); return nil }, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*worker.Layer), nil
}
