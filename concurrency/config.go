package concurrency

import (
	"errors"
	"fmt"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// KeyBy picks which field of a request the per-key limit counts by, and so
// whose limit it is.
type KeyBy uint8

const (
	// KeyByClient counts per Request.Key. The limit is the client's own: a request
	// over it is rejected with 429 (shed.Throttled).
	KeyByClient KeyBy = iota
	// KeyByRoute counts per Request.Route. The limit protects the service: a
	// request over it is rejected with 503 (shed.Shed).
	KeyByRoute
)

// String returns "key" or "route".
func (k KeyBy) String() string {
	switch k {
	case KeyByClient:
		return "key"
	case KeyByRoute:
		return "route"
	}
	return fmt.Sprintf("keyby(%d)", uint8(k))
}

// Policy names used in quotas and rejections (the RateLimit headers' policy
// names).
const (
	// PolicyOverall is the overall in-flight limit.
	PolicyOverall = "in-flight"
	// PolicyPerKey is the per-key in-flight limit (KeyBy KeyByClient).
	PolicyPerKey = "in-flight-per-key"
	// PolicyPerRoute is the per-route in-flight limit (KeyBy KeyByRoute).
	PolicyPerRoute = "in-flight-per-route"
)

// DefaultName is the layer's name unless Config.Name says otherwise.
const DefaultName = "concurrency"

// DefaultRetryAfter is the Retry-After of a rejection unless
// Config.RetryAfter says otherwise. An in-flight limit has no window, so the
// hint is a guess: about how long a typical request takes.
const DefaultRetryAfter = time.Second

// Config configures a Layer. At least one of Limit, PerKey and Adaptive
// must be set. One layer keeps one per-key dimension; to limit per key and
// per route, chain two layers.
type Config struct {
	// Name is the layer's name in rejections, metrics and logs (default
	// "concurrency").
	Name string
	// Limit is the most units in flight overall (default 0: no overall
	// limit, unless Adaptive sets one). Over it: 503.
	Limit int64
	// PerKey is the most units in flight per key (default 0: no per-key
	// limit). Over it: 429 with KeyByClient, 503 with KeyByRoute.
	PerKey int64
	// KeyBy picks the key the per-key limit counts by (default KeyByClient).
	KeyBy KeyBy
	// Enforcement is the mode (hard, soft, elastic), dry run and the action
	// (reject or queue) on "over" (default: hard, enforcing, rejecting).
	Enforcement shed.Enforcement
	// Adaptive, when set, makes the overall limit move between a floor and a
	// ceiling with observed latency; Limit is then the starting value
	// (default Adaptive.Floor).
	Adaptive *Adaptive
	// Fairness says how requests queued for the overall limit
	// (Enforcement.Action Queue) share it among clients (Request.Key),
	// within each priority: by default max-min fairly, every client
	// weighing the same, so that one client's flood takes no other
	// client's share, with no per-client number (see the package
	// documentation, "Fair share"). Fairness.Weight gives clients weights;
	// Fairness.Off serves the waiters of a priority in arrival order.
	Fairness layerkit.Fairness
	// RetryAfter is the Retry-After hint of a rejection (default 1s).
	RetryAfter time.Duration
	// Clock reads time for soft-mode episodes, the adaptive limit and the
	// wait queue (default shed.SystemClock).
	Clock shed.Clock
}

// Adaptive configures the adaptive overall limit: a gradient on latency
// against the service's no-load latency (see the package documentation for
// the algorithm and its convergence band).
type Adaptive struct {
	// Floor is the lowest the limit goes. Required, ≥ 1.
	Floor int64
	// Ceiling is the highest the limit goes. Required, ≥ Floor.
	Ceiling int64
	// Window is the shortest time one sample window lasts (default 1s).
	Window time.Duration
	// MinSamples is the fewest latency samples a window needs before the
	// limit moves (default 10).
	MinSamples int64
	// Tolerance is how much slower than the no-load latency requests may get
	// before the limit shrinks, as a ratio (default 1.0, valid 1.0 to 10).
	Tolerance float64
	// Smoothing is how far one window moves the limit toward its new target,
	// as a fraction (default 0.2, valid (0, 1]).
	Smoothing float64
}

// Defaults of Adaptive's optional fields.
const (
	DefaultAdaptiveWindow     = time.Second
	DefaultAdaptiveMinSamples = 10
	DefaultAdaptiveTolerance  = 1.0
	DefaultAdaptiveSmoothing  = 0.2
)

func (a Adaptive) withDefaults() Adaptive {
	if a.Window == 0 {
		a.Window = DefaultAdaptiveWindow
	}
	if a.MinSamples == 0 {
		a.MinSamples = DefaultAdaptiveMinSamples
	}
	if a.Tolerance == 0 {
		a.Tolerance = DefaultAdaptiveTolerance
	}
	if a.Smoothing == 0 {
		a.Smoothing = DefaultAdaptiveSmoothing
	}
	return a
}

// Validate reports every invalid field, by name.
func (a Adaptive) Validate() error {
	var errs []error
	if a.Floor < 1 {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Floor must be at least 1, got %d", a.Floor))
	}
	if a.Ceiling < 1 {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Ceiling must be at least 1, got %d", a.Ceiling))
	} else if a.Floor > a.Ceiling {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Floor (%d) must not be above Adaptive.Ceiling (%d)", a.Floor, a.Ceiling))
	}
	if a.Window < 0 {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Window must not be negative, got %v", a.Window))
	}
	if a.MinSamples < 0 {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.MinSamples must not be negative, got %d", a.MinSamples))
	}
	if a.Tolerance != 0 && !(a.Tolerance >= 1 && a.Tolerance <= 10) {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Tolerance must be within [1, 10], got %v", a.Tolerance))
	}
	if a.Smoothing != 0 && !(a.Smoothing > 0 && a.Smoothing <= 1) {
		errs = append(errs, fmt.Errorf("concurrency: Adaptive.Smoothing must be within (0, 1], got %v", a.Smoothing))
	}
	return errors.Join(errs...)
}

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	if c.Limit < 0 {
		errs = append(errs, fmt.Errorf("concurrency: Config.Limit must not be negative, got %d", c.Limit))
	}
	if c.PerKey < 0 {
		errs = append(errs, fmt.Errorf("concurrency: Config.PerKey must not be negative, got %d", c.PerKey))
	}
	if c.Limit == 0 && c.PerKey == 0 && c.Adaptive == nil {
		errs = append(errs, errors.New("concurrency: Config.Limit, Config.PerKey and Config.Adaptive are all unset: at least one limit is required"))
	}
	if c.KeyBy > KeyByRoute {
		errs = append(errs, fmt.Errorf("concurrency: Config.KeyBy: unknown value %d", c.KeyBy))
	}
	if c.RetryAfter < 0 {
		errs = append(errs, fmt.Errorf("concurrency: Config.RetryAfter must not be negative, got %v", c.RetryAfter))
	}
	if c.Adaptive != nil {
		if err := c.Adaptive.Validate(); err != nil {
			errs = append(errs, err)
		} else if c.Limit != 0 && (c.Limit < c.Adaptive.Floor || c.Limit > c.Adaptive.Ceiling) {
			errs = append(errs, fmt.Errorf("concurrency: Config.Limit (%d) must lie within Adaptive.Floor (%d) and Adaptive.Ceiling (%d)",
				c.Limit, c.Adaptive.Floor, c.Adaptive.Ceiling))
		}
	}
	if c.Enforcement.Action == shed.Queue && c.Limit == 0 && c.Adaptive == nil {
		errs = append(errs, errors.New("concurrency: Config.Enforcement.Action is Queue but there is no overall limit (Config.Limit or Config.Adaptive): only the overall limit queues, per-key limits reject"))
	}
	if err := c.Enforcement.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("concurrency: Config.Enforcement: %w", err))
	}
	return errors.Join(errs...)
}
