package worker

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
)

// The shed level refuses a fraction of the marginal priority (the one shed
// in part). Drawn at random, that fraction would fall on every client
// alike, and a light client would lose as large a part of its requests as
// the one whose flood caused the shedding. Instead the layer counts each
// client's requests at the marginal priority over one sampler interval,
// in a count-min sketch (two rows of marginalWidth counters, whatever the
// number of keys), and over the next interval it cuts the clients that
// sent the most down to a threshold: water-filling, the threshold T such
// that the sum over clients of min(sent, T) is what the level admits. A
// client that sent T or fewer is admitted; one that sent more is refused
// in the proportion 1 - T/sent. Before a full interval is counted (and for
// a request whose client was not seen) the old rule holds for the first:
// nothing from it is refused until it is counted, and while no threshold
// is known the draw is at random. Counting and deciding are on the path
// of the requests the level already sheds, never on the fast path.

const marginalWidth = 1024

type marginal struct {
	seed maphash.Seed
	cur  [2][marginalWidth]atomic.Uint32 // this interval's counts
	prev [2][marginalWidth]atomic.Uint32 // the last interval's
	// thresh is the water-filling threshold over prev, as float64 bits;
	// NaN while none is known.
	thresh atomic.Uint64
}

func newMarginal() *marginal {
	m := &marginal{seed: maphash.MakeSeed()}
	m.thresh.Store(math.Float64bits(math.NaN()))
	return m
}

func (m *marginal) index(key string) (uint64, uint64) {
	h := maphash.String(m.seed, key)
	return h % marginalWidth, (h >> 32) % marginalWidth
}

// refuses counts a request of key at the marginal priority and reports
// whether the level refuses it, frac being the fraction it sheds.
func (m *marginal) refuses(key string, frac uint32) bool {
	i, j := m.index(key)
	m.cur[0][i].Add(1)
	m.cur[1][j].Add(1)
	t := math.Float64frombits(m.thresh.Load())
	if math.IsNaN(t) {
		return rand.Uint32()%levelScale < frac
	}
	sent := float64(min(m.prev[0][i].Load(), m.prev[1][j].Load()))
	if sent <= t {
		return false
	}
	return rand.Float64() < 1-t/sent
}

// roll ends an interval: its counts become those decided on, and the
// threshold is set so that the level sheds frac (0..1) of them. It runs on
// the sampler.
func (m *marginal) roll(frac float64) {
	var counts [marginalWidth]uint32
	total := 0.0
	for r := range m.cur {
		for i := range m.cur[r] {
			c := m.cur[r][i].Swap(0)
			m.prev[r][i].Store(c)
			if r == 0 {
				counts[i] = c
				total += float64(c)
			}
		}
	}
	if total == 0 || frac <= 0 {
		m.thresh.Store(math.Float64bits(math.NaN()))
		return
	}
	m.thresh.Store(math.Float64bits(waterLevel(counts[:], (1-frac)*total)))
}

// waterLevel returns T such that the sum of min(c, T) over counts is
// target (at most their sum).
func waterLevel(counts []uint32, target float64) float64 {
	slices.Sort(counts)
	below := 0.0 // the sum of the counts under the level
	for i, c := range counts {
		rest := float64(len(counts) - i)
		// Every count from i on is cut to T: below + rest*T = target.
		if t := (target - below) / rest; t <= float64(c) {
			return max(t, 0)
		}
		below += float64(c)
	}
	return float64(counts[len(counts)-1])
}
