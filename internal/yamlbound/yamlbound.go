// Package yamlbound reads YAML that comes from outside the process (a
// configuration file others may edit) at a bounded cost: it refuses a file
// too large, nested too deep or whose aliases expand past a number of
// values before the work that would cost memory in proportion to them, and
// turns every panic of the YAML library into an error. Every refusal has a
// line and a column.
package yamlbound

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Limits bound one file. Zero fields take the defaults.
type Limits struct {
	// MaxBytes is the largest file read.
	MaxBytes int
	// MaxDepth is the deepest nesting of lists and mappings, aliases
	// expanded: "a: {b: [1]}" is 3 deep.
	MaxDepth int
	// MaxNodes is the most values (scalars, lists, mappings and their
	// entries) the file holds, each alias counted as every value its
	// anchor brings in.
	MaxNodes int
}

// The defaults of a reader that sets none; config.Limits sets its own.
const (
	DefaultMaxBytes = 4 << 20
	DefaultMaxDepth = 100
	DefaultMaxNodes = 1_000_000
)

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	return l
}

// Error is a refusal, at its line and column (from 1).
type Error struct {
	Line, Column int
	Msg          string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg) }

func at(tk *token.Token, format string, args ...any) *Error {
	e := &Error{Line: 1, Column: 1, Msg: fmt.Sprintf(format, args...)}
	if tk != nil && tk.Position != nil && tk.Position.Line > 0 {
		e.Line, e.Column = tk.Position.Line, max(tk.Position.Column, 1)
	}
	return e
}

// NodeAt returns an error at n's position.
func NodeAt(n ast.Node, format string, args ...any) *Error {
	var tk *token.Token
	if n != nil {
		tk = n.GetToken()
	}
	return at(tk, format, args...)
}

// ReadFile reads path, up to one byte past maxBytes, so that Parse's size
// check of a larger file reads no more of it. A regular file larger than
// maxBytes is refused before it is read, with an *Error at its first line.
func ReadFile(path string, maxBytes int) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > int64(maxBytes) {
		return nil, &Error{Line: 1, Column: 1, Msg: tooLarge(fi.Size(), maxBytes)}
	}
	data, err := io.ReadAll(io.LimitReader(fh, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

func tooLarge(size int64, max int) string {
	return fmt.Sprintf("the file is %d bytes, more than the %d read (raise the limit to read it)", size, max)
}

// Parse checks data against lim (zero fields: the defaults) and parses it.
// Its errors are *Error: a syntax error, a limit passed, or a failure of
// the YAML library. The size is checked first, then the nesting on the
// scanner's tokens (the parser's cost grows with the square of the depth,
// so the nesting is refused before it parses), then, on the parsed tree,
// the exact depth and the number of values with aliases expanded (which the
// tree shares, so the check costs what the file costs).
func Parse(data []byte, lim Limits) (*ast.File, error) {
	lim = lim.WithDefaults()
	if len(data) > lim.MaxBytes {
		line, col := lineCol(data, lim.MaxBytes)
		return nil, &Error{Line: line, Column: col, Msg: tooLarge(int64(len(data)), lim.MaxBytes)}
	}
	if err := scan(data, lim); err != nil {
		return nil, err
	}
	f, err := parse(data)
	if err != nil {
		return nil, err
	}
	w := walker{lim: lim, anchors: map[string]cost{}}
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, err := w.walk(doc.Body, 0); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Decode is yaml.NodeToValue, with the library's panics turned into an
// error at n.
func Decode(n ast.Node, v any, opts ...yaml.DecodeOption) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = NodeAt(n, "the YAML library failed on this file: %v", r)
		}
	}()
	return yaml.NodeToValue(n, v, opts...)
}

func parse(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, &Error{Line: 1, Column: 1, Msg: fmt.Sprintf("the YAML parser failed on this file: %v", r)}
		}
	}()
	f, err = parser.ParseBytes(data, 0)
	if err != nil {
		e := &Error{Line: 1, Column: 1, Msg: err.Error()}
		if se, ok := err.(*yaml.SyntaxError); ok {
			e = at(se.Token, "%s", se.Message)
		}
		return nil, e
	}
	return f, nil
}

// lineCol is the line and column of data[off].
func lineCol(data []byte, off int) (line, col int) {
	line, col = 1, 1
	for _, c := range data[:min(off, len(data))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// scanDepth is scan of the nesting alone.
func scanDepth(data []byte, max int) error {
	return scan(data, Limits{MaxBytes: len(data), MaxDepth: max, MaxNodes: math.MaxInt})
}

// scan refuses, before the file is parsed, a file whose nesting or number
// of entries, as a scan of its bytes sees them, passes lim. The parser
// costs a few hundred bytes per token, and the square of the depth, so a
// file of a million short values or of deep nesting would cost hundreds
// of MB before the tree could be checked.
//
// Entries are the block entries ("- ", "key:") and the flow ones
// ("[", "{", ",", ":"), never more than the values the tree will hold:
// "key: value" is one entry and three values (the pair, the key, the
// value), so a file this refuses the tree's count would refuse too.
//
// Nesting: a flow bracket ("[", "{") counts one level, and a block
// entry ("- " or "key:") one for each column deeper than the entries it
// sits in. It allocates nothing in proportion to the file and stops at the
// first line too deep, so that a deep file costs no more than its first
// levels. It skips what cannot nest (quoted scalars, comments, the lines of
// a block scalar), and counts a bracket that only looks like one (in a
// plain scalar) rather than miss one: it may see a level more than the
// parser, never many fewer, which the exact check on the tree settles.
func scan(data []byte, lim Limits) error {
	max := lim.MaxDepth
	entries := 0
	type level struct {
		col int
		seq bool
	}
	var (
		block []level
		flow  int
		quote byte // the quote of a quoted scalar that goes on past a line
		// literal is the indentation a block scalar's lines are deeper
		// than, or -1 outside one.
		literal = -1
	)
	enter := func(col int, seq bool) {
		for len(block) > 0 && block[len(block)-1].col > col {
			block = block[:len(block)-1]
		}
		if n := len(block); n > 0 && block[n-1].col == col {
			top := block[n-1]
			if top.seq == seq {
				return
			}
			// A key at the column of a list that sits under a key of that
			// column: the list has ended.
			if top.seq && n > 1 && block[n-2].col == col {
				block = block[:n-1]
				return
			}
		}
		block = append(block, level{col, seq})
	}
	refuse := func(line, col int) error {
		if len(block)+flow > max {
			return &Error{Line: line, Column: col + 1, Msg: fmt.Sprintf("nested deeper than %d levels (raise the limit to read it)", max)}
		}
		if entries++; entries > lim.MaxNodes {
			return &Error{Line: line, Column: col + 1, Msg: fmt.Sprintf("the file holds more than %d values (raise the limit to read it)", lim.MaxNodes)}
		}
		return nil
	}
	for line, rest := 1, data; len(rest) > 0; line++ {
		var text []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			text, rest = rest[:i], rest[i+1:]
		} else {
			text, rest = rest, nil
		}
		indent := 0
		for indent < len(text) && text[indent] == ' ' {
			indent++
		}
		blank := indent == len(text) || text[indent] == '#' || text[indent] == '\r'
		if literal >= 0 {
			if blank || indent > literal {
				continue
			}
			literal = -1
		}
		if blank && quote == 0 {
			continue
		}
		i := 0
		if flow == 0 && quote == 0 {
			if bytes.HasPrefix(text[indent:], []byte("---")) || bytes.HasPrefix(text[indent:], []byte("...")) {
				block = block[:0]
				continue
			}
			// Block entries: dashes, then perhaps a key.
			i = indent
			for i < len(text) && text[i] == '-' && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\r') {
				enter(i, true)
				if err := refuse(line, i); err != nil {
					return err
				}
				for i++; i < len(text) && text[i] == ' '; i++ {
				}
			}
			if keyIndicator(text[i:]) {
				enter(i, false)
				if err := refuse(line, i); err != nil {
					return err
				}
			}
		}
		// Brackets, quotes, comments and block scalar headers along the
		// line. start says a value may begin here (a bracket there opens a
		// collection; in a plain scalar of block context it does not).
		start := true
		for ; i < len(text); i++ {
			c := text[i]
			if quote != 0 {
				switch {
				case c == '\\' && quote == '"':
					i++
				case c == quote && quote == '\'' && i+1 < len(text) && text[i+1] == '\'':
					i++
				case c == quote:
					quote, start = 0, false
				}
				continue
			}
			switch {
			case c == ' ' || c == '\t' || c == '\r':
				continue
			case c == '#' && (i == 0 || text[i-1] == ' ' || text[i-1] == '\t'):
				i = len(text)
				continue
			case (c == '"' || c == '\'') && start:
				quote = c
				continue
			case (c == '[' || c == '{') && (start || flow > 0):
				flow++
				if err := refuse(line, i); err != nil {
					return err
				}
				start = true
				continue
			case (c == ']' || c == '}') && flow > 0:
				flow--
				start = false
				continue
			case (c == '|' || c == '>') && start && flow == 0:
				literal = indent
				i = len(text)
				continue
			case c == ',' && flow > 0:
				if err := refuse(line, i); err != nil {
					return err
				}
				start = true
				continue
			case c == '?' || c == '-':
				start = true
				continue
			case c == ':' && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\r' || (flow > 0 && strings.IndexByte(",[]{}", text[i+1]) >= 0)):
				if flow > 0 {
					if err := refuse(line, i); err != nil {
						return err
					}
				}
				start = true
				continue
			}
			start = false
		}
	}
	return nil
}

// keyIndicator reports whether a block line's text (after its dashes)
// holds a key: a ": " or a final ":" outside quotes and brackets.
func keyIndicator(text []byte) bool {
	if len(text) == 0 || text[0] == '[' || text[0] == '{' || text[0] == '#' {
		return false
	}
	if text[0] == '"' || text[0] == '\'' {
		end := bytes.IndexByte(text[1:], text[0])
		if end < 0 {
			return false
		}
		text = text[end+2:]
	}
	for i, c := range text {
		if c == '#' && i > 0 && text[i-1] == ' ' {
			return false
		}
		if c == ':' && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\r') {
			return true
		}
	}
	return false
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// cost is what a subtree expands to.
type cost struct{ nodes, depth int }

type walker struct {
	lim     Limits
	anchors map[string]cost
	nodes   int
}

// walk returns n's cost, refusing at the first value past the limits;
// depth is the nesting n sits in.
func (w *walker) walk(n ast.Node, depth int) (cost, error) {
	if n == nil {
		return cost{}, nil
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		c, err := w.walk(v.Value, depth)
		if err != nil {
			return c, err
		}
		if v.Name != nil {
			w.anchors[v.Name.String()] = c
		}
		return c, nil
	case *ast.AliasNode:
		name := ""
		if v.Value != nil {
			name = v.Value.String()
		}
		c, ok := w.anchors[name]
		if !ok {
			c = cost{nodes: 1}
		}
		if w.nodes += c.nodes; w.nodes > w.lim.MaxNodes {
			return c, NodeAt(n, "the alias *%s brings the file past %d values (raise the limit to read it)", name, w.lim.MaxNodes)
		}
		if depth+c.depth > w.lim.MaxDepth {
			return c, NodeAt(n, "the alias *%s nests the file deeper than %d levels (raise the limit to read it)", name, w.lim.MaxDepth)
		}
		return c, nil
	case *ast.TagNode:
		return w.walk(v.Value, depth)
	case *ast.CommentGroupNode:
		return cost{}, nil
	}
	if w.nodes++; w.nodes > w.lim.MaxNodes {
		return cost{}, NodeAt(n, "the file holds more than %d values (raise the limit to read it)", w.lim.MaxNodes)
	}
	var kids []ast.Node
	nests := false
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, mv := range v.Values {
			kids = append(kids, mv)
		}
	case *ast.MappingValueNode:
		kids, nests = []ast.Node{v.Key, v.Value}, true
	case *ast.MappingKeyNode:
		kids = []ast.Node{v.Value}
	case *ast.SequenceNode:
		kids, nests = v.Values, true
	}
	c := cost{nodes: 1}
	inner := depth
	if nests {
		if inner++; inner > w.lim.MaxDepth {
			return c, NodeAt(n, "nested deeper than %d levels (raise the limit to read it)", w.lim.MaxDepth)
		}
		c.depth = 1
	}
	deepest := 0
	for _, k := range kids {
		kc, err := w.walk(k, inner)
		if err != nil {
			return c, err
		}
		c.nodes += kc.nodes
		deepest = maxInt(deepest, kc.depth)
	}
	c.depth += deepest
	return c, nil
}

// Measure returns what data holds within lim: its values and its depth,
// aliases expanded, as Parse counts them.
func Measure(data []byte, lim Limits) (values, depth int, err error) {
	lim = lim.WithDefaults()
	f, err := Parse(data, lim)
	if err != nil {
		return 0, 0, err
	}
	w := walker{lim: lim, anchors: map[string]cost{}}
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		c, err := w.walk(doc.Body, 0)
		if err != nil {
			return 0, 0, err
		}
		values += c.nodes
		depth = maxInt(depth, c.depth)
	}
	return values, depth, nil
}
