package config

import "github.com/loadshed/loadshed/internal/yamlbound"

// Limits bound what reading one configuration file may cost, so that a
// file written by someone else (a ConfigMap several teams edit) is refused
// with an error at its line and column rather than taking the memory of the
// process that reads it. A zero field takes its default; a program that
// reads larger files raises it. The defaults are several times the
// largest realistic file (docs/config-limits.md measures one). A file
// past a limit is refused in a few MB and milliseconds; one within them
// costs what parsing it costs, a few hundred bytes of heap per value.
type Limits struct {
	// MaxBytes is the largest file read (default DefaultMaxBytes).
	MaxBytes int
	// MaxDepth is the deepest nesting of lists and sections, aliases
	// expanded (default DefaultMaxDepth); "a: {b: [1]}" is 3 deep.
	MaxDepth int
	// MaxValues is the most values (scalars, lists, sections and their
	// entries) the file holds, each alias counted as every value its
	// anchor brings in (default DefaultMaxValues).
	MaxValues int
	// MaxRules is the most rate-limit descriptors the file defines, at
	// every level, aliases expanded (default DefaultMaxRules).
	MaxRules int
}

// The default limits.
const (
	DefaultMaxBytes  = 4 << 20
	DefaultMaxDepth  = 100
	DefaultMaxValues = 200_000
	DefaultMaxRules  = 20_000
)

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxValues <= 0 {
		l.MaxValues = DefaultMaxValues
	}
	if l.MaxRules <= 0 {
		l.MaxRules = DefaultMaxRules
	}
	return l
}

// yaml returns the limits of the YAML reading.
func (l Limits) yaml() yamlbound.Limits {
	l = l.WithDefaults()
	return yamlbound.Limits{MaxBytes: l.MaxBytes, MaxDepth: l.MaxDepth, MaxNodes: l.MaxValues}
}
