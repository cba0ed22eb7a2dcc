package config

import (
	"sort"
	"strconv"
	"strings"
)

// Error is one thing wrong with a configuration: where (file, line and
// column when it came from a file; always the field's path), what, and the
// values the field allows when they are few.
type Error struct {
	// File is the file's name as given to Parse ("" for a File built in Go).
	File string
	// Line and Column locate the value, from 1; 0 when unknown.
	Line, Column int
	// Path is the field's path: "layers[0].ratelimit.descriptors[1].rate_limit.unit".
	Path string
	// Msg says what is wrong.
	Msg string
	// Allowed lists the valid values, when they are few.
	Allowed []string
}

// Error reads "loadshed.yaml:12:15: layers[0].ratelimit.descriptors[1].rate_limit.unit:
// unknown value "fortnight" (allowed: second, minute, hour, day)".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Column))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if len(e.Allowed) > 0 {
		b.WriteString(" (allowed: ")
		b.WriteString(strings.Join(e.Allowed, ", "))
		b.WriteByte(')')
	}
	return b.String()
}

// Errors is every error found in one configuration, in file order. Parse,
// Validate and Load return it (as an error) when it is not empty; match it
// with errors.As.
type Errors []*Error

// MaxErrorsShown is how many errors Errors.Error lists in full; the rest
// it counts ("and 17575 more errors"), so that a file with thousands of
// errors still makes a message, or a log line, a person can read.
const MaxErrorsShown = 20

// Error lists the errors, one a line, at most MaxErrorsShown of them.
func (es Errors) Error() string {
	shown := es[:min(len(es), MaxErrorsShown)]
	lines := make([]string, len(shown), len(shown)+1)
	for i, e := range shown {
		lines[i] = e.Error()
	}
	if more := len(es) - len(shown); more > 0 {
		lines = append(lines, "and "+strconv.Itoa(more)+" more error"+map[bool]string{true: "s"}[more > 1])
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	es.sort()
	return es
}

// pos is where a value sits in its file.
type pos struct{ line, col int }

// positions maps field paths to where their values are, so that checks
// made on the decoded structs can point into the file.
type positions map[string]pos

// locate fills e's position from the deepest path it has one for: a field
// missing from a section points at the section.
func (p positions) locate(e *Error) {
	if p == nil {
		return
	}
	for path := e.Path; ; {
		if at, ok := p[path]; ok {
			e.Line, e.Column = at.line, at.col
			return
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			if at, ok := p[""]; ok {
				e.Line, e.Column = at.line, at.col
			}
			return
		}
		path = path[:i]
	}
}

// place names the file in every error and points those without a position
// at their field.
func (p positions) place(file string, es Errors) Errors {
	for _, e := range es {
		e.File = file
		if e.Line == 0 {
			p.locate(e)
		}
	}
	return es
}
