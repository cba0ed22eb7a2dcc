// Package worker is loadshed's worker-utilization load shedder, the last
// line of defence. For every kind of service, CPU-bound, waiting on a
// database pool or a slow dependency, or both, the default needs no
// settings:
//
//	layer, err := worker.New(worker.DefaultConfig())
//	if err != nil { ... }
//	defer layer.Close()
//	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{..., layer}})
//
// It learns how much work the service can have in flight before work
// queues inside it (for a CPU, a connection of a pool, a slow downstream),
// admits that much, queues the rest in priority order and, when the queue
// is over its bound, sheds the least important requests first: test-mode
// traffic, then sheddable, then default (critical only when
// Config.ShedCritical says so). Its CPU and scheduler latency signals
// shrink the limit while the CPU is saturated, whether this process uses
// all of it or a neighbour takes part of it. Layer
// implements shed.Layer (named "worker"), and also shed.Headroom, the
// signal elastic limits of the other layers read, and layerkit.GaugeReporter.
//
// # Which set-up
//
//   - DefaultConfig: the learnt limit (Config.Limit). Use it unless you know
//     better; it follows the service as its capacity changes (a downstream
//     slowing, a neighbour taking the CPU) and needs no capacity, worker
//     count or latency target.
//   - A fixed budget (Config.Workers): the most requests in flight, known
//     and constant (the size of the one pool every handler waits on, say).
//     It replaces the learnt limit; it does not follow capacity changes.
//   - CPUBound: a budget of one per CPU while shedding, for handlers that
//     burn CPU without blocking, with Yield. It sheds healthy I/O-bound
//     services at moderate load (their CPU is idle while their requests
//     wait), so use it only for services that are CPU-bound and stay so.
//
// On the demonstration's one-CPU server whose handlers burn CPU, the
// default does about as well as CPUBound: go run ./examples/overload
// -scenario cpu -setups loadshed,loadshed-cpubound compares them in one
// run, and docs/results/ holds the figures of the last full run.
//
// # The learnt limit
//
// Little's law ties the three things the layer can measure: the requests
// in flight (k), their latency from admission to release (R, not counting
// the time they waited in the layer's queue) and the throughput (X = k/R).
// Below the knee (fewer in flight than the CPUs, or the pool's
// connections) latency is flat and throughput grows with k; past it
// throughput stays and latency grows in proportion to k, since the extra
// work only queues inside. On a CPU shared by every request latency grows
// from the first request past the CPU count; on a pool it is flat until
// the pool is full. The best limit is just past the knee. Some services'
// latency rises below the knee too (requests that wait on a pool, then
// share a CPU), but there throughput still rises with k, which a queue
// inside would not let it: the limit's first growth, by half a window,
// goes on through such a rise until throughput stops following k.
//
// Every window (at least 100ms, two latencies and two dozen completions;
// a few completions while the CPU reads saturated)
// the limit moves toward g × limit + a tenth of it, where g = clamp(1.1 ×
// baseline / R, 0.5, 1), as Netflix's Gradient2 and Envoy's adaptive
// concurrency filter do: past the knee it settles at about 1.1 × knee plus
// a tenth. It grows only while requests queue over it (a limit the traffic
// did not reach says nothing). While the CPU reads saturated (7/8 of its
// budget busy), or the scheduler latency is at its target with the CPU at
// least 3/4 busy (at eight times its target, whatever the CPU reads: the
// CPU's average lags a flood's first second), it shrinks instead (0.7 a
// window, down to Min: one per CPU, whatever was learnt of the knee
// before). With the CPU less busy a late run queue is bursts (calls to a
// pool that end together, then burn CPU together), not a CPU that cannot
// take more, and shrinking for them left such a service below its knee.
// A moment's stall of the host (stolen time, a pause) reads that way
// too, and takes a service that needs many in flight (a pool, then a
// share of the CPU) down to one or two; so once the reading is over, if
// requests queue while the CPU reads less than half busy twice in a row,
// the limit regrows by slow start (by half a window, until the knee) to
// 0.7 of where the saturation was read, rather than by a tenth.
// While the CPU or the scheduler reads half of its saturation, every
// admitted request yields once before it starts, as with Config.Yield,
// so that the requests read meanwhile are decided
// first; a request handed capacity by a release yields too, since the Go
// runtime runs the goroutine a release wakes next, in the releaser's time
// slice: admissions from the queue then followed one another while the
// requests the network poller read waited in the global run queue, which
// one P checks only every 61st schedule (a scheduler latency p99 of
// 100-150ms on the demonstration's one-CPU server, critical p99 11x the
// floor's, against 3.5x with the yield).
//
// For the same reason, while the CPU reads saturated, the capacity a release
// frees is handed to the queue through the network poller rather than at
// once: a Go process notices arriving requests only when a P runs out of
// goroutines or when its monitor thread polls, every 10ms, so a P kept
// busy by admitted work read the flood in batches every 10ms (a request
// that costs nothing took 6.9ms to answer on a busy one-P server,
// bench/cmd/pollprobe), and the capacity freed in between went to those
// that waited before the critical ones came. The release writes a byte
// to a pipe the poller watches; the goroutine that reads it runs once
// the P has run the goroutines runnable before it, after the poll that
// also returns the requests that arrived meanwhile, and it writes to a
// second pipe, whose reader grants once the P has run those too (a flood
// reads dozens in one poll, more than a yield waits for). Until then no
// waiter takes capacity (a waiter's timeout would otherwise hand it out
// from its timer), for at most 5ms from the release, or from a later
// release if the hand-off is overdue by then: a flood that never lets
// the P run dry is read by the monitor's polls, and a hand-off can wait
// behind a whole handler. With Min at one per CPU, critical p99 on the
// demonstration's one-CPU server went from 3.2-4.0x the floor's at 2x and
// 5x to 1.12-1.37x, the p99 of all admitted at 5x from 3.7x to
// 1.24-1.26x (the cpu scenario of docs/overload.md). Only saturated,
// though: a CPU half busy in bursts (a service whose requests wait on a
// pool, then burn CPU) polls when a burst ends, and a hand-off waited for
// that with the capacity idle (33ms, against 2ms on a CPU-bound server).
//
// Everything rests on the baseline, the no-queue latency, and the layer
// keeps it current in three ways, since under sustained overload in flight
// is never low and a plain minimum drifts with the standing queue, and
// since a baseline left stale when the service gets slower reads the
// slower service as queueing and shrinks the limit far below what the
// service can take:
//
//   - it follows any lower window mean at once (a faster service);
//   - when latency rises more than in flight does, no queue of ours grew
//     that much: the service itself got slower, and the baseline scales
//     with it in that window;
//   - it probes, as Envoy re-measures its minimum latency and as Uber's
//     Cinnamon watches how throughput moves with in flight: every dozen
//     windows under load (sooner when latency reads 1.8 times the baseline),
//     the limit drops to 0.85 of itself for two windows (one to drain, one
//     to measure). If latency fell with in flight (the throughput held), work
//     queues inside even there: the lower limit and its latency are kept,
//     and the next probe comes soon, a little deeper. If latency held, the
//     probe went below the knee: its latency is the baseline, the knee is
//     above the probe's in flight (the limit stays above that while it
//     fades), and, if that baseline is 1.3 times the last or more (a
//     service that got slower), the limit regrows fast.
//
// The simulation in limit_sim_test.go (a processor-shared CPU and a pool
// of 8 connections, Poisson arrivals, three streams each) checks that the
// limit settles near the knee at 2x, 5x and 10x load with goodput of 95%
// of capacity or more, sheds nothing at half load, is back within 2s
// when the service slows to a third and when it recovers, and, with a
// neighbour taking half the CPU under 10x load, keeps serving 90% of the
// reduced capacity or more in time for its clients (with critical waits
// of a second, it served 22%).
//
// Requests over the limit wait in fair queues (layerkit.NewFairQueue),
// highest priority first and, within a priority, shared among clients
// (see Fair share).
// Critical requests have a queue of their own, first in first out and
// served before the other, so that their tail stays that of a strict
// priority scheduler; they are never refused for the queue's length, only
// for their own deadline or the queue's wait of one second. Once that
// queue has not emptied for 100ms, critical demand alone is over capacity
// (served first, it empties within moments otherwise), and a second's
// wait would serve only requests whose clients are about to give up: those
// who join it then wait at most the other priorities' bound, and at least
// 100ms, as Facebook's controlled delay bounds a standing queue's waits.
// At 10x on the demonstration's one-CPU server with a neighbour taking
// half the CPU, the second's wait served nothing (every critical request
// was answered after its client's timeout); the bounded wait served 80%
// of the reduced capacity. A request of another priority behind more
// critical waiters than the learnt limit serves within its own wait is
// refused at once rather than queued: it would be refused when its wait
// ran out, having cost a waiter, a timer and a wake-up besides. The other
// priorities wait newest first once their queue has stood for half a
// second (adaptive LIFO: under sustained overload the oldest waiters are
// those likeliest to time out, and serving the newest keeps the latency of
// what is served low; while one client's flood holds most of the queue,
// the other clients' requests are served in the order they came, as
// layerkit's fair queue says). That queue's bounds come from what the limit
// learnt, not from settings: a limit's worth of waiters (at least 16, so
// that the bursts of a moderate load queue rather than shed), each for at
// most five mean latencies (at least 20ms, at most half a second, so that
// a slow service still answers a request that waited within a second) or
// its own deadline. Over the
// length bound a newcomer evicts the newest waiter of the lowest priority
// below its own (the oldest while newest first is on), or is refused if
// there is none; while newest first is on, the oldest waiter of its own
// priority is refused instead, the one that would be served last: a
// waiter so refused would otherwise hold its place until the queue
// drained, and be served then, late (on the demonstration's mixed
// service, whose one CPU reads its requests in batches, the queue waits
// of its lower priorities now last at most about one round of that
// cycle). In the simulation, with the floor (a perfect strict-priority
// scheduler with no overhead, the better of first-in-first-out and
// newest-first, on the same arrivals), critical p99 is 1.09-1.35 times
// the floor's at 2x and 5x, and the p99 of everything served 0.66-1.55
// times.
//
// The request path, while nobody waits and the limit has room, is a few
// atomic loads and a compare-and-swap on the in-flight count, plus, for
// the first 256 requests of each window, a reading of the monotonic clock;
// a release counts the completion with one atomic add, and adds a sampled
// latency with two more (BenchmarkAcquireRelease: about what a fixed
// worker budget costs).
//
// # Fair share
//
// Within each priority, critical included, the capacity the layer has (the
// learnt limit, or the worker budget with the Queue action) goes to the
// clients waiting (Request.Key) max-min fairly: the next slot freed goes
// to the client that has had the least of it, counted in seat-seconds
// (each grant's units times the time it held its slot, by its weight). A
// client asking less than an equal share is served as it asks; a flood
// from one client takes what the others leave and no more, and when the
// queue is over its bound it is the flooding client's newest waiter that
// is refused (its oldest, while newest first is on, or its newcomer, while
// it holds most of the queue: a newcomer that queued only to push out
// another of its waiters would cost the server a waiter, a timer and a
// wake-up for each of its refusals, out of the capacity the others share).
// No per-client number is needed: per-key rate limits stay for quotas.
// Config.Fairness gives clients weights (tiers) or turns fairness off.
// With one client the layer admits and queues as it did without fairness.
// Memory stays bounded whatever the number of keys; what a client owning
// many keys can get is in layerkit's documentation ("Fair share"). The
// shed level's refusals within the marginal priority (the one it sheds in
// part) fall on the clients that send the most of it: each client's
// requests are counted over a sampler interval, in a sketch of fixed size,
// and over the next those above a threshold are cut down to it, the
// threshold set so that the level refuses the fraction it sheds.
// TopClients and the gauges clients_queued and fair_share (per priority)
// show who holds the capacity.
//
// # Signals
//
// A sampler (every Config.Interval, default 250ms) reads each signal as a
// pressure, 0 idle and 1 saturated, smooths it (an exponential moving
// average) and takes the highest:
//
//   - cpu: this process's CPU time (gopsutil) and, on Linux, the time its
//     threads waited in the kernel's run queue for a CPU given to another
//     process (/proc/self/task/*/schedstat; reported on its own as
//     cpu_wait), against its real budget (at
//     1.25 times the budget with the learnt limit, so that it reads 0.8
//     only once every CPU is busy: the limit already keeps admitted work
//     from queueing for the CPU): the
//     cgroup v2 quota (cpu.max, the tightest of its cgroup and the parents)
//     where there is one, else GOMAXPROCS, never more than the host's CPUs
//     (DetectBudget). A process with 2 CPUs of quota on a 64-core host reads
//     right. The wait counts because a process that a neighbour keeps
//     from half of its CPU uses only half and waits for the rest: it is as
//     saturated as one alone on a busy CPU, and its CPU time alone reads
//     it half idle. Go's scheduler latency cannot see it: a goroutine on a
//     thread the kernel set aside counts as running. The wait counted is
//     at most the time others had the CPUs the process may run on (their
//     busy time in /proc/stat, the hypervisor's steal included, less the
//     process's own): the kernel's figure also counts the time an idle
//     virtual CPU takes to be scheduled again, which a server woken by
//     thousands of packets a second pays thousands of times, and which
//     read as a saturated CPU on a server refusing a flood with its CPU
//     40% idle.
//   - sched_latency: the p99 of the Go scheduler latency recorded since the
//     last sample (runtime/metrics /sched/latencies:seconds), against
//     Config.SchedLatencyTarget: how long runnable goroutines wait for a
//     CPU, which grows with the run queue as the CPU saturates.
//   - queue_delay (with the Queue action): as in CoDel, the shortest wait
//     in the layer's queue over the interval against Config.QueueDelayTarget;
//     a queue that never drains below the target is a standing queue. Only
//     requests that queued for capacity count, never those the level sheds
//     and that wait for it to fall: a signal fed by the shedding it causes
//     holds the level up after the overload is gone. With the learnt limit
//     the queue stands under any overload by design, and the signal is
//     only reported.
//   - in_flight (with a worker budget or the learnt limit): requests in
//     flight against the budget or the limit, reported and counted in the
//     headroom; the budget or limit itself enforces it, per request, so it
//     does not move the level.
//   - any Config.Signals the user adds.
//
// With the learnt limit the cpu and sched_latency signals shrink the limit
// and are otherwise only reported: they do not move the level. A signal
// must not be fed by the shedding it causes, and the scheduler latency
// counts the admitted requests that yield and wait in the run queue by
// design. Driving the level, it read 4x its target in a flood's first
// moments, took the level to 3 within a sample, and held it there: on the
// demonstration's one-CPU server at 5x, all but critical traffic was shed
// with the CPU half idle (48% of capacity served). The limit and its
// priority queue already shed the least important requests first.
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
// against unloaded, and goodput (flags in overload_test.go). The
// demonstration, go run ./examples/overload -scenario cpu,io,drop,noisy,
// floods the example server in the four kinds of service the default is
// meant for, each judged against a simulated floor.
package worker
