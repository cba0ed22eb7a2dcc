// Package worker is loadshed's worker-utilization load shedder, the last
// line of defence: when this process is too busy for the work it is given,
// it sheds the least important requests first, test-mode traffic, then
// sheddable, then default (critical only when Config.ShedCritical says
// so), and when that brings it back into a good state it brings traffic
// back, slowly. Layer implements shed.Layer (named "worker"), and also
// shed.Headroom, the signal elastic limits of the other layers read, and
// layerkit.GaugeReporter.
//
// # Signals
//
// A sampler (every Config.Interval, default 250ms) reads each signal as a
// pressure, 0 idle and 1 saturated, smooths it (an exponential moving
// average) and takes the highest:
//
//   - cpu: this process's CPU time (gopsutil) against its real budget: the
//     cgroup v2 quota (cpu.max, the tightest of its cgroup and the parents)
//     where there is one, else GOMAXPROCS, never more than the host's CPUs
//     (DetectBudget). A process with 2 CPUs of quota on a 64-core host reads
//     right.
//   - sched_latency: the p99 of the Go scheduler latency recorded since the
//     last sample (runtime/metrics /sched/latencies:seconds), against
//     Config.SchedLatencyTarget: how long runnable goroutines wait for a
//     CPU, which grows with the run queue as the CPU saturates.
//   - queue_delay (with the Queue action): as in CoDel, the shortest wait
//     in the layer's queue over the interval against Config.QueueDelayTarget;
//     a queue that never drains below the target is a standing queue.
//   - in_flight (with a worker budget): requests in flight against
//     Config.Workers, reported and counted in the headroom; the budget
//     itself enforces it, per request, so it does not move the level.
//   - any Config.Signals the user adds.
//
// # The controller
//
// The pressure drives a shed level: 0 sheds nothing, 1 sheds all test-mode
// traffic, 1.25 also a quarter of sheddable traffic, 3 everything but
// critical. From Config.ShedAt (0.8) the level climbs in proportion to how
// far the pressure is above Config.RecoverBelow (0.7), Config.RiseGain
// levels a second per unit, so a flood is met within a sample or two; below
// RecoverBelow it falls by one level per Config.Recovery (3s; slower just
// under RecoverBelow, so that it settles into the band rather than stepping
// over it); in between it holds, so that steady overload settles instead of
// flapping. With the defaults, once the load is gone the layer goes from
// shedding everything but critical (level 3) to shedding nothing in about
// 9s (the simulation in sim_test.go measures it). Shedding
// within the marginal priority is a fraction, drawn at random per request,
// so the step from shedding nothing to shedding a priority is gradual.
//
// The request path reads the level and the headroom published by the
// sampler as one atomic value: one load and a comparison, plus a random
// draw for the marginal priority. A shed request gets a 503 (Reason
// "temporary-reduced-capacity") with Retry-After (Config.RetryAfter), or,
// with the Queue action, waits in a layerkit.WaitQueue until the level admits
// its priority, highest priority first. Dry run admits it and marks the
// lease; soft mode admits the marginal priority's share for at most
// Enforcement.OverageFor per episode.
//
// # The worker budget
//
// A sampler is slow next to a flood, and a level that sheds a fraction of
// requests at random admits a Poisson stream, which still queues for the
// CPU: at the utilisation that good goodput needs, its p99 is many service
// times. Config.Workers bounds the request units in flight, checked per
// request: over it a request is refused (or queued) at once, so the
// admitted stream follows the service's pace instead.
//
// On a busy CPU that is not enough by itself. A handler that burns CPU does
// not yield: the requests that arrive while it runs are not read until it
// ends, and then the first one read takes the freed worker, whatever its
// priority. With Config.Yield, an admitted request yields once before it
// starts, so the others read in the same gap are decided first; and while
// it yields, a request of higher priority that finds the budget spent
// displaces it (it is refused when it resumes). The budget then goes to the
// most important request of each gap, critical requests do not pile up over
// the budget, and the run queue holds about one handler per CPU, so
// answering the rest stays cheap.
//
// A budget of one request per CPU refuses the bursts of a moderate load,
// though the CPU has room on average; a larger one lets a flood queue
// several handlers deep. Config.BusyWorkers is the budget while the level
// sheds: a larger Workers for bursts, one per CPU once the load is past
// what the CPU can take. CPUBound returns this set-up (Workers four per
// CPU, BusyWorkers one per CPU).
//
// # Headroom
//
// Headroom is one minus the pressure, and 0 while the layer sheds anything:
// a rate or concurrency limit in elastic mode (shed.Enforcement.Headroom)
// goes above its limit exactly while this process has room, and snaps back
// when it has not.
//
// # Bad input
//
// Config.Validate names every bad field. Cgroup files that are there but
// unreadable or malformed are not an error: the budget falls back to
// GOMAXPROCS and Budget.Err records why, once, at New. Under cgroup v1 or
// none the budget is GOMAXPROCS. A signal that returns NaN, an infinity or a
// negative number counts as 0, so a broken gauge never takes the service
// down.
//
// # The overload test
//
// go test ./worker -run Overload -overload -v runs a CPU-burning HTTP server
// (GOMAXPROCS=1, pinned to one CPU with taskset) offered several times its
// capacity by an open-loop client on another CPU: with no protection, with
// DefaultConfig() and with CPUBound(), and prints critical success, p99 loaded
// against unloaded, and goodput (flags in overload_test.go).
package worker
