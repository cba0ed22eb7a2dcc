package worker

import (
	"math"
	"time"
)

// controller turns pressure into a shed level. The level counts priorities
// shed, lowest first: 0 sheds nothing, 1 sheds all test-mode traffic, 1.25
// also a quarter of sheddable traffic, 3 everything but critical. It is not
// safe for concurrent use: the sampler alone steps it.
//
// The level climbs in proportion to how far pressure is above RecoverBelow,
// once pressure reaches ShedAt; it falls at a constant slow rate while
// pressure is below RecoverBelow; between the two it holds. Proportional
// rise means big steps in a flood and small ones near the threshold, so
// under steady overload it settles inside the band instead of overshooting
// out of it; the band is what keeps it from flapping.
type controller struct {
	shedAt, recoverBelow float64
	riseGain             float64 // levels per second per unit of pressure over recoverBelow
	fallRate             float64 // levels per second
	max                  float64
	level                float64
}

// maxExcess caps how much one sample can push: a wild reading (a GC pause
// seen as scheduler latency) moves the level at most this many times the
// gain per second.
const maxExcess = 4

func newController(c Config, levels int) controller {
	return controller{shedAt: c.ShedAt, recoverBelow: c.RecoverBelow, riseGain: c.RiseGain,
		fallRate: 1 / c.Recovery.Seconds(), max: float64(levels)}
}

// step moves the level for pressure p held over dt, and returns it.
func (c *controller) step(p float64, dt time.Duration) float64 {
	s := dt.Seconds()
	switch {
	case p >= c.shedAt:
		c.level += c.riseGain * math.Min(p-c.recoverBelow, maxExcess) * s
	case p < c.recoverBelow:
		c.level -= c.fallRate * s
	}
	c.level = math.Min(math.Max(c.level, 0), c.max)
	return c.level
}

// levelScale is the fixed-point scale of the published level: one priority
// is 1<<16, so the marginal priority's shed fraction has 16 bits.
const levelScale = 1 << 16

// encodeLevel turns a level into its fixed-point form; any level above zero
// sheds something.
func encodeLevel(level float64) uint32 {
	if level <= 0 {
		return 0
	}
	v := uint32(math.Round(level * levelScale))
	if v == 0 {
		v = 1
	}
	return v
}

// shedFraction is the share of priority index idx that level v sheds.
func shedFraction(v uint32, idx int) float64 {
	lo := uint32(idx) * levelScale
	switch {
	case v <= lo:
		return 0
	case v >= lo+levelScale:
		return 1
	}
	return float64(v-lo) / levelScale
}
