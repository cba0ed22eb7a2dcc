package config

// Building a layer's fair share from a fairness section.

import (
	"maps"
	"math"
	"slices"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/layerkit"
)

// build returns the layerkit.Fairness the section says: a weight looked
// up by key when it gives weights, none (every client weighing 1)
// otherwise.
func (f Fairness) build() layerkit.Fairness {
	out := layerkit.Fairness{Off: f.Off}
	if len(f.Weights) == 0 && (f.DefaultWeight == 0 || f.DefaultWeight == 1) {
		return out
	}
	weights := maps.Clone(f.Weights)
	def := f.DefaultWeight
	if def == 0 {
		def = 1
	}
	out.Weight = func(r shed.Request) float64 {
		if w, ok := weights[r.Key]; ok {
			return w
		}
		return def
	}
	return out
}

// fairness checks a fairness section: every weight a positive number.
func (c *checker) fairness(f *Fairness, path string) {
	if !(f.DefaultWeight >= 0) || math.IsInf(f.DefaultWeight, 0) {
		c.errorf(path+".default_weight", nil, "must be a positive number, got %v", f.DefaultWeight)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Weights)) {
		if w := f.Weights[k]; !(w > 0) || math.IsInf(w, 0) {
			c.errorf(path+".weights."+k, nil, "must be a positive number, got %v", w)
		}
	}
}
