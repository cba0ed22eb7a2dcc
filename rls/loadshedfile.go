package rls

import (
	"fmt"
	"strconv"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/loadshed/loadshed/config"
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
		var soft *Soft
		if r.Mode == shed.Soft {
			soft = &Soft{Overage: r.Overage, OverageFor: r.OverageFor, OverageCooldown: r.OverageCooldown}
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

func fromDescriptors(cs []config.Descriptor, dryRun bool, soft *Soft, path string) []Descriptor {
	out := make([]Descriptor, 0, len(cs))
	for i, c := range cs {
		at := path + "[" + strconv.Itoa(i) + "]"
		d := Descriptor{Key: c.Key, Value: c.Value, ShadowMode: c.ShadowMode || dryRun, path: at}
		if r := c.RateLimit; r != nil {
			unit := pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit.String())])
			rpu := r.RequestsPerUnit
			if rpu > 1<<32-1 {
				rpu = 1<<32 - 1
			}
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
	ds := FromFile(f)
	if len(ds) == 0 {
		return nil, fmt.Errorf("rls: %s has no ratelimit layer: nothing to serve", path)
	}
	return ds, nil
}
