package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
)

const ms1 = time.Millisecond

func TestFloorServesByPriorityThenByOrder(t *testing.T) {
	// One server, 2ms a request. A default request arrives first and runs
	// at once; two critical requests and a sheddable one queue behind it.
	arr := []arrival{
		{0, shed.Default, 0},
		{ms1 / 2, shed.Critical, 0},
		{ms1, shed.Sheddable, 0},
		{3 * ms1 / 2, shed.Critical, 0},
	}
	m := floorModel{servers: 1, service: 2 * ms1, timeout: time.Second}
	// Oldest first: default 0-2, critical@0.5 2-4, critical@1.5 4-6,
	// sheddable@1 6-8.
	if got, want := m.simulate(arr, oldestFirst), []time.Duration{2 * ms1, 7 * ms1 / 2, 7 * ms1, 9 * ms1 / 2}; !slices.Equal(got, want) {
		t.Errorf("oldest first: %v, want %v", got, want)
	}
	// Newest first: the later critical request goes ahead of the earlier.
	if got, want := m.simulate(arr, newestFirst), []time.Duration{2 * ms1, 11 * ms1 / 2, 7 * ms1, 5 * ms1 / 2}; !slices.Equal(got, want) {
		t.Errorf("newest first: %v, want %v", got, want)
	}
	// A 5ms timeout: the sheddable request, which could start only at 6ms
	// and end at 8ms, 7ms after it arrived, is dropped, costing nothing.
	m.timeout = 5 * ms1
	if got, want := m.simulate(arr, oldestFirst), []time.Duration{2 * ms1, 7 * ms1 / 2, -1, 9 * ms1 / 2}; !slices.Equal(got, want) {
		t.Errorf("timeout 5ms: %v, want %v", got, want)
	}
}

func TestFloorUsesEveryServerAndTheSlowdown(t *testing.T) {
	// Two servers of 30ms; four requests at once: two run at once, two
	// wait 30ms. From 50ms on, the service is three times slower.
	arr := []arrival{{0, shed.Default, 0}, {0, shed.Default, 0}, {0, shed.Default, 0}, {0, shed.Default, 0}, {50 * ms1, shed.Critical, 0}, {200 * ms1, shed.Critical, 0}}
	m := floorModel{servers: 2, service: 30 * ms1, timeout: time.Second, slow: []slowdown{{50 * ms1, 150 * ms1, 3}}}
	// The critical request at 50ms starts at 60ms, when both servers come
	// free, and takes 90ms; the one at 200ms runs at full speed again.
	want := []time.Duration{30 * ms1, 30 * ms1, 60 * ms1, 60 * ms1, 100 * ms1, 30 * ms1}
	if got := m.simulate(arr, oldestFirst); !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

func TestFloorOfPoissonArrivalsIsTheQueueingFormula(t *testing.T) {
	// One class, Poisson arrivals at half the capacity of one server with
	// a fixed service time (M/D/1): the mean wait is ρs/(2(1-ρ)) = 1ms for
	// ρ = 0.5 and s = 2ms, so the mean latency is 3ms.
	rng := newRand(42)
	var arr []arrival
	var at time.Duration
	for len(arr) < 200_000 {
		at += time.Duration(rng.ExpFloat64() / 250 * float64(time.Second))
		arr = append(arr, arrival{at, shed.Default, 0})
	}
	m := floorModel{servers: 1, service: 2 * ms1, timeout: time.Second}
	var sum time.Duration
	for _, l := range m.simulate(arr, oldestFirst) {
		if l < 0 {
			t.Fatal("a request was dropped at half load")
		}
		sum += l
	}
	mean := float64(sum) / float64(len(arr)) / float64(ms1)
	if math.Abs(mean-3) > 0.05 {
		t.Errorf("mean latency %.3fms, want 3ms", mean)
	}
}

func TestFloorAtFiveTimesCapacity(t *testing.T) {
	// The demonstration's mix at 5× the capacity of one 2ms server, 10s:
	// the floor keeps every critical request (they alone are half the
	// capacity), answers at capacity, and its critical p99 is the 9.3ms
	// docs/overload.md derived (wait for the request running and for the
	// critical requests ahead).
	arr := poissonArrivals(newRand(5), 2500, 11*time.Second, oneClient)
	m := floorModel{servers: 1, service: 2 * ms1, timeout: time.Second, end: 11 * time.Second}
	f, _ := m.floor(arr, time.Second, 10*time.Second)
	if f.criticalSuccess != 1 {
		t.Errorf("critical success %.4f, want 1", f.criticalSuccess)
	}
	if f.goodput < 495 || f.goodput > 500 {
		t.Errorf("goodput %.1f/s, want the capacity, 500/s", f.goodput)
	}
	if f.criticalP99 < 8*ms1 || f.criticalP99 > 11*ms1 {
		t.Errorf("critical p99 %s, want about 9.3ms", f.criticalP99)
	}
	// Newest first, the default requests answered are the fresh ones: the
	// p99 of all answered is about the critical p99, far below the timeout
	// oldest first would give them (the default requests alone are twice
	// what the CPU leaves them).
	if f.allP99 < 5*ms1 || f.allP99 > 20*ms1 {
		t.Errorf("p99 of all answered %s, want about the critical p99", f.allP99)
	}
	if fifo := figuresOf(arr, m.simulate(arr, oldestFirst), time.Second, 10*time.Second, false); fifo.allP99 < 500*ms1 {
		t.Errorf("oldest first, p99 of all answered %s: want most of the timeout", fifo.allP99)
	}
	// The same arrivals, the same floor: it depends on nothing else.
	if g, _ := m.floor(arr, time.Second, 10*time.Second); g != f {
		t.Errorf("two runs differ: %+v and %+v", f, g)
	}
}

// The floor's servers: one CPU, a pool's connections, and for a service
// that needs both, the fewest in flight that serve its capacity, measured.
func TestFloorServersOfEachKindOfService(t *testing.T) {
	o, err := parseOptions(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		fewest    int
		servers   int
		poolKnown bool
	}{
		{scenarioCPU, 0, 1, false},
		{scenarioNoisy, 0, 1, false},
		{scenarioIO, 0, 4, true},
		{scenarioDrop, 0, 4, true},
		{scenarioMixed, 12, 12, false},
		{scenarioMixed, 0, 1, false}, // never none
	} {
		sc, err := newScenario(c.name, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := sc.floorServers(c.fewest); got != c.servers {
			t.Errorf("%s, fewest serving %d: %d servers, want %d", c.name, c.fewest, got, c.servers)
		}
		if sc.poolKnown() != c.poolKnown {
			t.Errorf("%s: poolKnown %v, want %v", c.name, sc.poolKnown(), c.poolKnown)
		}
	}
}

// A service that needs both a pool and the CPU is served by as many at
// once as it needs to serve its capacity, within the goodput target's
// margin: the floor's throughput is the capacity, and fewer in flight do
// not serve it.
func TestFewestServingIsTheLeastInFlightThatServesTheCapacity(t *testing.T) {
	// Closed loops over the mixed service, as calibrations measured them.
	for _, c := range []struct {
		capacity float64
		points   []loopPoint
		want     int
	}{
		// Five calibrations in a row: throughput per latency peaked
		// within 5% at 10, 18, 12, 10 and 16 clients.
		{242, []loopPoint{{4, 101}, {6, 134}, {8, 160}, {10, 191}, {12, 208}, {14, 226}, {16, 241}, {18, 257}, {20, 242}}, 16},
		{250, []loopPoint{{4, 101}, {6, 132}, {8, 168}, {10, 194}, {12, 209}, {14, 226}, {16, 250}, {18, 287}, {20, 290}}, 16},
		{245, []loopPoint{{4, 100}, {6, 138}, {8, 168}, {10, 192}, {12, 218}, {14, 227}, {16, 250}, {18, 271}, {20, 243}}, 16},
		{241, []loopPoint{{4, 100}, {6, 133}, {8, 163}, {10, 191}, {12, 207}, {14, 221}, {16, 230}, {18, 249}, {20, 238}}, 16},
		{236, []loopPoint{{4, 96}, {6, 138}, {8, 161}, {10, 182}, {12, 199}, {14, 225}, {16, 244}, {18, 234}, {20, 244}}, 14},
		// None within the margin: the loop that served the most.
		{400, []loopPoint{{4, 100}, {8, 200}, {12, 300}, {16, 290}}, 12},
		{242, nil, 0},
	} {
		if got := fewestServing(c.points, c.capacity); got != c.want {
			t.Errorf("capacity %.0f, loops %v: %d, want %d", c.capacity, c.points, got, c.want)
		}
	}
}

// The floor's sent and served come from one queue order: a request one
// order cuts at the end of the flood (counted as neither) another answers
// in time. Taken from different orders, the floor once read 6 requests
// fewer sent than served ("not served -6") at 1x on the mixed service.
func TestFloorServesNoMoreThanWasSent(t *testing.T) {
	arr := poissonArrivals(newRand(14), 245, 2500*time.Millisecond, oneClient)
	m := floorModel{servers: 14, service: 57 * time.Millisecond, timeout: time.Second, end: 2500 * time.Millisecond}
	f, _ := m.floor(arr, time.Second, 1500*time.Millisecond)
	if f.served > f.sent || f.served == 0 {
		t.Errorf("served %d of %d sent", f.served, f.sent)
	}
}

// poissonArrivals is Poisson arrivals at rate a second until until, each
// given its priority and client by pick (drawn after its time, from rng).
func poissonArrivals(rng *rand.Rand, rate float64, until time.Duration, pick func(*rand.Rand) (shed.Priority, int)) []arrival {
	var arr []arrival
	var at time.Duration
	for {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= until {
			return arr
		}
		p, client := pick(rng)
		arr = append(arr, arrival{at: at, prio: p, client: client})
	}
}

// oneClient picks a priority from the demonstration's mix, every request
// from one client.
func oneClient(rng *rand.Rand) (shed.Priority, int) { return pickPriority(rng), 0 }
