package rls

// Reading envoyproxy/ratelimit's configuration files as they are, with
// loadshed's additions (algorithm, burst, unit_multiplier, period,
// rate_limits), and every error placed at its line and column.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/internal/yamlbound"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
)

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRate        `yaml:"rate_limit"`
	RateLimits     []yamlRate       `yaml:"rate_limits"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	QuotaMode      bool             `yaml:"quota_mode"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
}

type yamlRate struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
	// loadshed's additions.
	UnitMultiplier int64  `yaml:"unit_multiplier"`
	Period         string `yaml:"period"`
	Algorithm      string `yaml:"algorithm"`
	Burst          int64  `yaml:"burst"`
	// Soft mode: mode: soft, with its overage.
	Mode            string  `yaml:"mode"`
	Overage         float64 `yaml:"overage"`
	OverageFor      string  `yaml:"overage_for"`
	OverageCooldown string  `yaml:"overage_cooldown"`
}

// IsEnvoyConfig reports whether path is a directory (of envoyproxy/ratelimit
// files) or a YAML file whose top level has a domain or descriptors and no
// layers: an envoyproxy/ratelimit file (perhaps a broken one) rather than
// loadshed's own. It reads the file within the default config.Limits; a
// file past them is not one.
func IsEnvoyConfig(path string) bool { return isEnvoyConfig(path, config.Limits{}) }

func isEnvoyConfig(path string, lim config.Limits) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		return true
	}
	data, err := readLimited(path, lim)
	if err != nil {
		return false
	}
	return looksEnvoy(data, yamlLimits(lim))
}

// readLimited reads path within lim's size (yamlbound.ReadFile): a larger
// file is refused as config.Errors at its first line.
func readLimited(path string, lim config.Limits) ([]byte, error) {
	data, err := yamlbound.ReadFile(path, lim.WithDefaults().MaxBytes)
	var be *yamlbound.Error
	if errors.As(err, &be) {
		return nil, config.Errors{yamlError(path, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	return data, nil
}

func yamlLimits(lim config.Limits) yamlbound.Limits {
	lim = lim.WithDefaults()
	return yamlbound.Limits{MaxBytes: lim.MaxBytes, MaxDepth: lim.MaxDepth, MaxNodes: lim.MaxValues}
}

// LoadEnvoyConfig reads envoyproxy/ratelimit configuration: one file, or
// every *.yaml and *.yml file of a directory, one domain each. Errors are
// config.Errors, each with its file, line and column. Each file is read
// within the default config.Limits.
func LoadEnvoyConfig(path string) ([]Domain, error) { return loadEnvoyConfig(path, config.Limits{}) }

func loadEnvoyConfig(path string, lim config.Limits) ([]Domain, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("rls: %s holds no .yaml or .yml file", path)
		}
	}
	var out []Domain
	var errs config.Errors
	seen := map[string]string{}
	for _, f := range files {
		data, err := readLimited(f, lim)
		if err != nil {
			return nil, err
		}
		d, es := parseEnvoyConfig(f, data, lim)
		errs = append(errs, es...)
		if len(es) > 0 {
			continue
		}
		if prev, dup := seen[d.Name]; dup {
			errs = append(errs, &config.Error{File: f, Line: 1, Column: 1, Path: "domain", Msg: fmt.Sprintf("domain %q is already defined in %s", d.Name, prev)})
			continue
		}
		seen[d.Name] = f
		out = append(out, d)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// ParseEnvoyConfig reads one envoyproxy/ratelimit file. It refuses what
// envoyproxy/ratelimit refuses (unknown keys, an empty domain or key, a
// duplicate entry, an unknown unit, a unit with unlimited, a bad replaces)
// and what loadshed's additions make wrong, a value the field cannot hold
// exactly (requests_per_unit: 2.5, value: 010), and a file past the default
// config.Limits (its size, nesting, values with aliases expanded, and
// descriptors), before it costs memory in proportion to them.
func ParseEnvoyConfig(name string, data []byte) (Domain, config.Errors) {
	return parseEnvoyConfig(name, data, config.Limits{})
}

func parseEnvoyConfig(name string, data []byte, lim config.Limits) (Domain, config.Errors) {
	lim = lim.WithDefaults()
	file, err := yamlbound.Parse(data, yamlLimits(lim))
	if err != nil {
		return Domain{}, config.Errors{yamlError(name, err)}
	}
	var body ast.Node
	if len(file.Docs) > 0 && file.Docs[0] != nil {
		body = file.Docs[0].Body
	}
	p := &envoyParser{name: name, file: file, maxRules: lim.MaxRules}
	if body != nil {
		p.exact(body, rootFields, "", map[ast.Node]bool{})
		if len(p.errs) > 0 {
			return Domain{}, p.errs
		}
	}
	var root yamlRoot
	if body != nil {
		if err := yamlbound.Decode(body, &root, yaml.Strict()); err != nil {
			return Domain{}, config.Errors{yamlError(name, err)}
		}
	}
	if root.Domain == "" {
		p.errorf("domain", "config file cannot have empty domain")
		if e := p.errs[len(p.errs)-1]; e.Line == 0 {
			e.Line, e.Column = 1, 1 // no domain at all: the file's top
		}
	}
	d := Domain{Name: root.Domain, File: name, Descriptors: p.descriptors(root.Descriptors, "descriptors")}
	return d, p.errs
}

type envoyParser struct {
	name     string
	file     *ast.File
	errs     config.Errors
	maxRules int
	rules    int
	anchors  map[string]ast.Node // by name, for the exactness check
}

// errorf records an error at the value of the field path
// ("descriptors[0].key"), or at the nearest field above it the file has.
func (p *envoyParser) errorf(path, format string, args ...any) {
	e := &config.Error{File: p.name, Path: path, Msg: fmt.Sprintf(format, args...)}
	e.Line, e.Column = locate(p.file, path)
	p.errs = append(p.errs, e)
}

// locate returns the line and column of the value at path in file, or of
// the nearest field above it the file has; 1:1 when there is none.
func locate(file *ast.File, path string) (line, col int) {
	defer func() {
		if recover() != nil { // the YAML library's path lookup failed
			line, col = 1, 1
		}
	}()
	for at := path; at != ""; {
		if yp, err := yaml.PathString("$." + at); err == nil {
			if n, err := yp.FilterFile(file); err == nil && n != nil {
				if t := n.GetToken(); t != nil && t.Position != nil {
					return t.Position.Line, t.Position.Column
				}
			}
		}
		i := strings.LastIndexAny(at, ".[")
		if i < 0 {
			break
		}
		at = at[:i]
	}
	return 1, 1
}

func (p *envoyParser) descriptors(ys []yamlDescriptor, path string) []Descriptor {
	var out []Descriptor
	seen := map[string]bool{}
	for i, y := range ys {
		at := path + "[" + strconv.Itoa(i) + "]"
		if p.rules++; p.rules > p.maxRules {
			if p.rules == p.maxRules+1 {
				p.errorf(at, "the file defines more than %d descriptors, aliases expanded (raise the limit to read it)", p.maxRules)
			}
			return out
		}
		if y.Key == "" {
			p.errorf(at, "descriptor has empty key")
			continue
		}
		composite := y.Key
		if y.Value != "" {
			composite += "_" + y.Value
		}
		if seen[composite] {
			p.errorf(at, "duplicate descriptor composite key %q", composite)
			continue
		}
		seen[composite] = true
		d := Descriptor{Key: y.Key, Value: y.Value, ShadowMode: y.ShadowMode, DetailedMetric: y.DetailedMetric, path: at}
		p.fields(y, &d, at)
		if y.RateLimit != nil && len(y.RateLimits) > 0 {
			p.errorf(at+".rate_limits", "set rate_limit or rate_limits, not both")
		}
		rates := y.RateLimits
		ratesPath := at + ".rate_limits"
		if y.RateLimit != nil {
			rates = []yamlRate{*y.RateLimit}
		}
		for j, r := range rates {
			rp := ratesPath + "[" + strconv.Itoa(j) + "]"
			if y.RateLimit != nil {
				rp = at + ".rate_limit"
			}
			if r.Unlimited {
				if len(rates) > 1 {
					p.errorf(rp+".unlimited", "unlimited cannot be one of several limits")
				}
				if r.Unit != "" {
					p.errorf(rp+".unit", "should not specify rate limit unit when unlimited")
				}
				d.Unlimited = true
				continue
			}
			if l, ok := p.rate(r, rp); ok {
				d.Limits = append(d.Limits, l)
			}
		}
		d.Descriptors = p.descriptors(y.Descriptors, at+".descriptors")
		out = append(out, d)
	}
	return out
}

func (p *envoyParser) rate(r yamlRate, path string) (Limit, bool) {
	ok := true
	l := Limit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Algorithm: ratelimit.FixedWindow, Burst: r.Burst}
	for _, rep := range r.Replaces {
		switch {
		case rep.Name == "":
			p.errorf(path+".replaces", "should not have an empty replaces entry")
			ok = false
		case rep.Name == r.Name:
			p.errorf(path+".replaces", "replaces should not contain name of same descriptor")
			ok = false
		default:
			l.Replaces = append(l.Replaces, rep.Name)
		}
	}
	if r.Algorithm != "" {
		alg, err := ratelimit.ParseAlgorithm(r.Algorithm)
		if err != nil {
			p.errorf(path+".algorithm", "unknown algorithm %q (allowed: token-bucket, leaky-bucket, fixed-window, sliding-log, sliding-window)", r.Algorithm)
			ok = false
		}
		l.Algorithm = alg
	}
	switch {
	case r.Period != "" && (r.Unit != "" || r.UnitMultiplier != 0):
		p.errorf(path+".period", "set period, or unit (with unit_multiplier), not both")
		return l, false
	case r.Period != "":
		d, err := time.ParseDuration(r.Period)
		if err != nil || d <= 0 {
			p.errorf(path+".period", "period must be a positive duration (\"10s\", \"1m30s\"), got %q", r.Period)
			return l, false
		}
		l.Period, l.Unit = d, unitFor(d)
	default:
		v, known := pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit)]
		if !known || v == int32(pb.RateLimitResponse_RateLimit_UNKNOWN) {
			p.errorf(path+".unit", "invalid rate limit unit '%s' (allowed: second, minute, hour, day, week, month, year)", r.Unit)
			return l, false
		}
		l.Unit = pb.RateLimitResponse_RateLimit_Unit(v)
		mult := r.UnitMultiplier
		if mult == 0 {
			mult = 1
		}
		if mult < 1 || mult > int64(maxPeriod/unitPeriods[l.Unit]) {
			p.errorf(path+".unit_multiplier", "unit_multiplier must be between 1 and %d, got %d", maxPeriod/unitPeriods[l.Unit], r.UnitMultiplier)
			return l, false
		}
		l.Period = unitPeriods[l.Unit] * time.Duration(mult)
	}
	if !p.soft(r, &l, path) {
		ok = false
	}
	if err := l.check(); err != nil {
		p.errorf(path, "%v", err)
		ok = false
	}
	return l, ok
}

// soft reads mode: soft and its overage fields into l.Soft.
func (p *envoyParser) soft(r yamlRate, l *Limit, path string) bool {
	switch r.Mode {
	case "", "hard":
		if r.Overage != 0 || r.OverageFor != "" || r.OverageCooldown != "" {
			p.errorf(path+".mode", "overage, overage_for and overage_cooldown need mode: soft")
			return false
		}
		return true
	case "soft":
	default:
		p.errorf(path+".mode", "unknown mode %q (allowed: hard, soft)", r.Mode)
		return false
	}
	s := &shed.Enforcement{Mode: shed.Soft, Overage: r.Overage}
	ok := true
	for _, f := range []struct {
		name, v string
		d       *time.Duration
	}{{"overage_for", r.OverageFor, &s.OverageFor}, {"overage_cooldown", r.OverageCooldown, &s.OverageCooldown}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d < 0 {
			p.errorf(path+"."+f.name, "%s must be a duration (\"30s\"), got %q", f.name, f.v)
			ok = false
			continue
		}
		*f.d = d
	}
	if !ok {
		return false
	}
	if err := s.Validate(); err != nil {
		p.errorf(path+".overage", "%v", err)
		ok = false
	}
	l.Soft = s
	return ok
}

// maxPeriod bounds a window: a century is longer than any sensible limit
// and far from every overflow.
const maxPeriod = 100 * 365 * 24 * time.Hour

// yamlError turns a YAML syntax or type error into a config.Error at its
// position.
func yamlError(name string, err error) *config.Error {
	e := &config.Error{File: name, Msg: err.Error(), Line: 1, Column: 1}
	var be *yamlbound.Error
	if errors.As(err, &be) {
		e.Line, e.Column, e.Msg = be.Line, be.Column, be.Msg
		return e
	}
	var te interface {
		GetToken() *token.Token
		GetMessage() string
	}
	if errors.As(err, &te) {
		e.Msg = te.GetMessage()
		if t := te.GetToken(); t != nil && t.Position != nil {
			e.Line, e.Column = t.Position.Line, t.Position.Column
		}
	}
	return e
}
