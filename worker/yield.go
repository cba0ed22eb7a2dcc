package worker

import (
	"runtime"

	"github.com/loadshed/loadshed/shed"
)

// With Config.Yield, an admitted request yields the processor once before
// its work starts, so that the requests already read and waiting to run get
// their answer first. While it yields it is "starting": a request of higher
// priority that finds the worker budget spent takes its place (displaces
// it), and it is refused instead when it resumes. On a busy CPU the requests
// that arrived while one ran are all decided in that gap, so the worker
// budget goes to the most important of them, not to whichever was read
// first, and critical requests need not pile up over the budget.

const (
	grantStarting uint32 = iota
	grantStarted
	grantDisplaced
)

// yieldThenStart admits a request whose cost units are already counted in
// flight: it yields once, then starts it, unless a request of higher
// priority displaced it meanwhile.
func (l *Layer) yieldThenStart(req shed.Request, cost int64) (shed.Lease, error) {
	g := l.grants.Get().(*grant)
	g.prio, g.cost = req.Priority.Index(), cost
	g.state.Store(grantStarting)
	l.startMu.Lock()
	l.starting = append(l.starting, g)
	l.startMu.Unlock()

	runtime.Gosched()

	l.startMu.Lock()
	for i, s := range l.starting {
		if s == g {
			l.starting = append(l.starting[:i], l.starting[i+1:]...)
			break
		}
	}
	l.startMu.Unlock()
	if !g.state.CompareAndSwap(grantStarting, grantStarted) {
		// Displaced: the displacer took over the units; no lease was handed
		// out, so the record goes back as it is.
		l.grants.Put(g)
		return shed.Lease{}, l.rejection(true)
	}
	ls := shed.NewLease(l)
	ls.Ref = g
	ls.ID = g.gen.Load()
	ls.Cost = cost
	return ls, nil
}

// displace takes the units of the lowest-priority starting request below
// priority index idx that holds at least cost units (the newest of them),
// and reports whether it found one. The victim is refused when it resumes;
// units it held beyond cost are given back.
func (l *Layer) displace(cost int64, idx int) bool {
	l.startMu.Lock()
	vi := -1
	for i, g := range l.starting {
		if g.prio < idx && g.cost >= cost && (vi < 0 || g.prio <= l.starting[vi].prio) {
			vi = i
		}
	}
	if vi < 0 {
		l.startMu.Unlock()
		return false
	}
	v := l.starting[vi]
	if !v.state.CompareAndSwap(grantStarting, grantDisplaced) {
		l.startMu.Unlock()
		return false
	}
	l.starting = append(l.starting[:vi], l.starting[vi+1:]...)
	l.startMu.Unlock()
	if extra := v.cost - cost; extra > 0 {
		l.inflight.Add(-extra)
	}
	return true
}
