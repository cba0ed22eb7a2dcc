package main

// The server's CPU does not always run at one speed: on a virtual machine
// the host's other tenants and its frequency scaling make it slower or
// faster from one step to the next, without the hypervisor counting any of
// it as stolen. A CPU-bound scenario's capacity is measured once, in the
// calibration; a step that ran on a CPU a tenth slower than that misses
// its goodput target by a tenth, whatever decided what to refuse (in one
// run the cpu scenario served 481/s of its 482/s at 2x and 406/s at 5x,
// with nothing on /proc to show why). The example server times each
// request's work on its thread's CPU clock (the work is a fixed count of
// loop iterations), and the demo compares a step's mean with the
// calibration's: a step whose work ran more than maxSpeedChange slower or
// faster is not trusted. (Timing a fixed loop on the server's CPU between
// steps did not tell such steps apart: a step probed a tenth slower there
// served all of its capacity.)

// maxSpeedChange is how far from the calibration's the server CPU's speed
// may read in a step that decides a target: the margin of the goodput
// target (95% of the bound). Within one run on a quiet machine steps read
// within about 4% of each other.
const maxSpeedChange = 0.05

// workClock is the example servers' work timed so far: CPU seconds and
// how many requests' work.
type workClock struct {
	cpu, n float64
}

// readWorkClock scrapes the servers at bases; ok is false when any does not
// time its work (no thread CPU clock) or cannot be scraped.
func readWorkClock(bases []string) (w workClock, ok bool) {
	for _, b := range bases {
		m, err := scrape(b)
		if err != nil {
			return workClock{}, false
		}
		cpu, ok1 := m["loadshed_example_work_cpu_seconds_total"]
		n, ok2 := m["loadshed_example_work_timed_total"]
		if !ok1 || !ok2 {
			return workClock{}, false
		}
		w.cpu, w.n = w.cpu+cpu, w.n+n
	}
	return w, true
}

// timeWork runs run and, with measure, reads the work clocks of the servers
// at bases around it: the mean CPU time of the work timed meanwhile, in
// seconds (0 when none was), and false when a reading failed.
func timeWork(bases []string, measure bool, run func()) (float64, bool) {
	if !measure {
		run()
		return 0, false
	}
	before, ok := readWorkClock(bases)
	run()
	if !ok {
		return 0, false
	}
	after, ok := readWorkClock(bases)
	if !ok {
		return 0, false
	}
	return perRequest(before, after), true
}

// perRequest is the mean CPU time of the work timed between a and b, in
// seconds; 0 when none was.
func perRequest(a, b workClock) float64 {
	if n := b.n - a.n; n > 0 {
		return (b.cpu - a.cpu) / n
	}
	return 0
}

// speedChange is how much faster the CPU ran in a step than in the
// calibration, as a share (negative: slower), from the mean CPU time of
// the same work in each; 0 when either is unknown.
func speedChange(calibration, step float64) float64 {
	if calibration <= 0 || step <= 0 {
		return 0
	}
	return calibration/step - 1
}
