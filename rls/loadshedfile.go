package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/internal/yamlbound"
	"github.com/loadshed/loadshed/shed"
)

// FromFile returns the domains of a loadshed file's ratelimit sections:
// each section's domain and descriptors, its algorithm, burst and shadow
// mode per rule, its dry_run as shadow mode for all, its soft mode for all
// (elastic, which needs this process's headroom, counts as hard; so does
// the queue action: the service answers at once). Sections naming the
// same domain are merged; the file's other layers play no part in the
// service. A section without a domain serves the domain "".
func FromFile(f *config.File) []Domain {
	var out []Domain
	index := map[string]int{}
	for i, l := range f.Layers {
		r := l.RateLimit
		if r == nil {
			continue
		}
		var soft *shed.Enforcement
		if r.Mode == shed.Soft {
			soft = &shed.Enforcement{Mode: shed.Soft, Overage: r.Overage, OverageFor: r.OverageFor, OverageCooldown: r.OverageCooldown}
		}
		ds := fromDescriptors(r.Descriptors, r.DryRun, soft, "layers["+strconv.Itoa(i)+"].ratelimit.descriptors")
		if j, ok := index[r.Domain]; ok {
			out[j].Descriptors = append(out[j].Descriptors, ds...)
			continue
		}
		index[r.Domain] = len(out)
		out = append(out, Domain{Name: r.Domain, Descriptors: ds})
	}
	return out
}

func fromDescriptors(cs []config.Descriptor, dryRun bool, soft *shed.Enforcement, path string) []Descriptor {
	out := make([]Descriptor, 0, len(cs))
	for i, c := range cs {
		at := path + "[" + strconv.Itoa(i) + "]"
		d := Descriptor{Key: c.Key, Value: c.Value, ShadowMode: c.ShadowMode || dryRun, path: at}
		if r := c.RateLimit; r != nil {
			unit := pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit.String())])
			// Past what the protocol's field holds: tooManyPerUnit refuses
			// it in a file; from Go, the most the field holds.
			rpu := min(r.RequestsPerUnit, math.MaxUint32)
			d.Limits = []Limit{{Name: c.Name, RequestsPerUnit: uint32(rpu), Unit: unit, Period: r.Unit.Period(), Algorithm: r.Algorithm, Burst: r.Burst, Soft: soft}}
		}
		d.Descriptors = fromDescriptors(c.Descriptors, dryRun, soft, at+".descriptors")
		out = append(out, d)
	}
	return out
}

// Load reads path as loadshed serve does: a directory or an
// envoyproxy/ratelimit file (IsEnvoyConfig), else a loadshed file, of
// which the ratelimit sections count. Errors are config.Errors with
// positions where the file has them. Files are read within the default
// config.Limits.
func Load(path string) ([]Domain, error) { return LoadLimited(path, config.Limits{}) }

// LoadLimited is Load within lim (zero fields: the defaults): a file past
// them is refused, with the position where it passes them.
func LoadLimited(path string, lim config.Limits) ([]Domain, error) {
	if isEnvoyConfig(path, lim) {
		return loadEnvoyConfig(path, lim)
	}
	data, err := readLimited(path, lim)
	if err != nil {
		return nil, err
	}
	// The service builds no chain: elastic layers and Redis stores are
	// checked as a file, not connected.
	f, err := config.Parse(path, data, config.Options{MemoryOnly: true, Limits: lim, Headroom: shed.HeadroomFunc(func() float64 { return 1 })})
	if err != nil {
		return nil, err
	}
	if es := tooManyPerUnit(path, data, f, lim); len(es) > 0 {
		return nil, es
	}
	ds := FromFile(f)
	if len(ds) == 0 {
		return nil, fmt.Errorf("rls: %s has no ratelimit layer: nothing to serve", path)
	}
	return ds, nil
}

// tooManyPerUnit refuses, at their positions, the limits of f whose
// requests_per_unit is past what Envoy's protocol holds (2^32-1), which
// the service would otherwise serve as that.
func tooManyPerUnit(path string, data []byte, f *config.File, lim config.Limits) config.Errors {
	var paths []string
	var walk func(ds []config.Descriptor, at string)
	walk = func(ds []config.Descriptor, at string) {
		for i, d := range ds {
			p := at + "[" + strconv.Itoa(i) + "]"
			if d.RateLimit != nil && d.RateLimit.RequestsPerUnit > math.MaxUint32 {
				paths = append(paths, p+".rate_limit.requests_per_unit")
			}
			walk(d.Descriptors, p+".descriptors")
		}
	}
	for i, l := range f.Layers {
		if l.RateLimit != nil {
			walk(l.RateLimit.Descriptors, "layers["+strconv.Itoa(i)+"].ratelimit.descriptors")
		}
	}
	if len(paths) == 0 {
		return nil
	}
	file, err := yamlbound.Parse(data, yamlLimits(lim)) // parsed once already: within the limits
	var es config.Errors
	for _, p := range paths {
		e := &config.Error{File: path, Path: p, Line: 1, Column: 1, Msg: fmt.Sprintf("the rate limit service serves at most %d requests per unit", uint32(math.MaxUint32))}
		if err == nil {
			e.Line, e.Column = locate(file, p)
		}
		es = append(es, e)
	}
	return es
}
