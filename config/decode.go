package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/loadshed/loadshed/internal/yamlbound"
)

// MaxFileBytes is the largest file Parse reads by default
// (Limits.MaxBytes raises it).
const MaxFileBytes = DefaultMaxBytes

// Parse reads a configuration from YAML or JSON (JSON is YAML's flow
// style, and goes through the same parser). name is the file's name, for
// the errors. It reports every problem at once, each with its line and
// column, the field's path and, for words, the allowed values: syntax
// errors (the first only: the parser stops there), unknown fields, values
// of the wrong type, unknown words, and everything Validate finds. A file
// past opts.Limits (its size, nesting, values with aliases expanded, rules)
// is refused at the position where it passes them, before it is decoded.
//
// The result is nil whenever err is not.
func Parse(name string, data []byte, opts Options) (*File, error) {
	f, _, err := parse(name, data, opts)
	return f, err
}

func parse(name string, data []byte, opts Options) (*File, positions, error) {
	f, pos, errs := decodeFile(name, data, opts.Limits)
	if !f.unparsed {
		errs = append(errs, related(errs, validate(f, opts))...)
	}
	if err := pos.place(name, errs).err(); err != nil {
		return nil, pos, err
	}
	pos.place(name, f.warnings)
	return f, pos, nil
}

// Load reads, validates and builds the file at path: Parse and Build in
// one, with errors of the build placed in the file too.
func Load(path string, opts Options) (*Built, error) {
	return load(path, opts, nil)
}

func load(path string, opts Options, prev *Built) (*Built, error) {
	data, err := readFile(path, opts.Limits)
	if err != nil {
		return nil, err
	}
	f, pos, err := parse(path, data, opts)
	if err != nil {
		return nil, err
	}
	b, err := build(f, opts, prev)
	if es, ok := err.(Errors); ok {
		return nil, pos.place(path, es).err()
	}
	return b, err
}

// readFile reads path within lim's size (yamlbound.ReadFile): a larger
// file is refused as Errors at its first line.
func readFile(path string, lim Limits) ([]byte, error) {
	data, err := yamlbound.ReadFile(path, lim.WithDefaults().MaxBytes)
	var be *yamlbound.Error
	if errors.As(err, &be) {
		return nil, Errors{{File: path, Line: be.Line, Column: be.Column, Msg: be.Msg}}
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return data, nil
}

// decodeFile parses data and decodes it into a File, collecting every
// decoding error and where each field's value is.
func decodeFile(name string, data []byte, lim Limits) (*File, positions, Errors) {
	lim = lim.WithDefaults()
	d := &decoder{pos: positions{}, anchors: map[string]ast.Node{}, maxNodes: lim.MaxValues}
	f := &File{}
	file, err := yamlbound.Parse(data, lim.yaml())
	if err != nil {
		e := &Error{Line: 1, Column: 1, Msg: err.Error()}
		var be *yamlbound.Error
		if errors.As(err, &be) {
			e.Line, e.Column, e.Msg = be.Line, be.Column, be.Msg
		}
		d.errs = append(d.errs, e)
		f.unparsed = true
		return f, d.pos, d.errs
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, ok := doc.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		if body != nil {
			d.errorf(doc.Body, "", nil, "the file holds more than one YAML document; put the whole configuration in one")
			break
		}
		body = doc.Body
	}
	if body == nil {
		d.errs = append(d.errs, &Error{Line: 1, Column: 1, Msg: "the file is empty"})
		f.unparsed = true
		return f, d.pos, d.errs
	}
	d.pos[""] = nodePos(body)
	d.decode(body, reflect.ValueOf(f).Elem(), "")
	if len(d.errs) == 0 {
		d.countRules(f, lim.MaxRules)
	}
	return f, d.pos, d.errs
}

// countRules refuses a file with more rate-limit descriptors than max, at
// the first past it.
func (d *decoder) countRules(f *File, max int) {
	n := 0
	var walk func(ds []Descriptor, path string) bool
	walk = func(ds []Descriptor, path string) bool {
		for i := range ds {
			at := path + "[" + strconv.Itoa(i) + "]"
			if n++; n > max {
				p := d.pos[at]
				d.errs = append(d.errs, &Error{Line: p.line, Column: p.col, Path: at, Msg: fmt.Sprintf("the file defines more than %d descriptors, aliases expanded (raise the limit to read it)", max)})
				return false
			}
			if !walk(ds[i].Descriptors, at+".descriptors") {
				return false
			}
		}
		return true
	}
	for i, l := range f.Layers {
		if l.RateLimit != nil && !walk(l.RateLimit.Descriptors, "layers["+strconv.Itoa(i)+"].ratelimit.descriptors") {
			return
		}
	}
}

type decoder struct {
	errs     Errors
	pos      positions
	anchors  map[string]ast.Node
	nodes    int
	maxNodes int // a backstop: yamlbound counted the values already
}

func nodePos(n ast.Node) pos {
	if n == nil {
		return pos{}
	}
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		return nodePos(m.Values[0])
	}
	if mv, ok := n.(*ast.MappingValueNode); ok && mv.Key != nil {
		return nodePos(mv.Key)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return pos{}
	}
	return pos{tk.Position.Line, tk.Position.Column}
}

func (d *decoder) errorf(n ast.Node, path string, allowed []string, format string, args ...any) {
	p := nodePos(n)
	d.errs = append(d.errs, &Error{Line: p.line, Column: p.col, Path: path, Msg: fmt.Sprintf(format, args...), Allowed: allowed})
}

// resolve follows anchors, aliases and tags to the value node.
func (d *decoder) resolve(n ast.Node, path string) ast.Node {
	for depth := 0; n != nil && depth < 64; depth++ {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if v.Name != nil {
				d.anchors[v.Name.String()] = v.Value
			}
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil {
				name = v.Value.String()
			}
			target, ok := d.anchors[name]
			if !ok {
				d.errorf(n, path, nil, "alias *%s names no anchor defined before it", name)
				return nil
			}
			n = target
		case *ast.TagNode:
			n = v.Value
		default:
			return n
		}
	}
	return n
}

var durationType = reflect.TypeFor[time.Duration]()

func (d *decoder) decode(n ast.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > d.maxNodes {
		if d.nodes == d.maxNodes+1 {
			d.errorf(n, path, nil, "the file expands to more than %d values (aliases included)", d.maxNodes)
		}
		return
	}
	n = d.resolve(n, path)
	if n == nil {
		return
	}
	if _, ok := n.(*ast.NullNode); ok {
		return
	}
	if _, seen := d.pos[path]; !seen {
		d.pos[path] = nodePos(n)
	}
	t := v.Type()
	if e, ok := enums[t]; ok {
		s, isText := text(n)
		if !isText {
			d.errorf(n, path, e.words, "want one of the words below, got %s", describe(n))
			return
		}
		val, ok := e.parse(s)
		if !ok {
			d.errorf(n, path, e.words, "unknown value %q", s)
			return
		}
		v.Set(val)
		return
	}
	if t == durationType {
		d.duration(n, v, path)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			d.errorf(n, path, nil, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(seq.Values), len(seq.Values))
		for i, item := range seq.Values {
			d.decode(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	case reflect.Map:
		d.mapping(n, v, path)
	case reflect.String:
		s, ok := text(n)
		if !ok {
			d.errorf(n, path, nil, "want text, got %s (quote it)", describe(n))
			return
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := n.(*ast.BoolNode)
		if !ok {
			d.errorf(n, path, []string{"true", "false"}, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b.Value)
	case reflect.Int, reflect.Int64:
		i, ok := n.(*ast.IntegerNode)
		if !ok {
			d.errorf(n, path, nil, "want a whole number, got %s", describe(n))
			return
		}
		var x int64
		switch iv := i.Value.(type) {
		case int64:
			x = iv
		case uint64:
			if iv > math.MaxInt64 {
				d.errorf(n, path, nil, "%d is too large", iv)
				return
			}
			x = int64(iv)
		}
		if v.OverflowInt(x) {
			d.errorf(n, path, nil, "%d is too large", x)
			return
		}
		v.SetInt(x)
	case reflect.Float64:
		switch f := n.(type) {
		case *ast.FloatNode:
			v.SetFloat(f.Value)
		case *ast.IntegerNode:
			switch iv := f.Value.(type) {
			case int64:
				v.SetFloat(float64(iv))
			case uint64:
				v.SetFloat(float64(iv))
			}
		default:
			d.errorf(n, path, nil, "want a number, got %s", describe(n))
		}
	default:
		d.errorf(n, path, nil, "cannot be set from a file (a %v)", t)
	}
}

func (d *decoder) duration(n ast.Node, v reflect.Value, path string) {
	if i, ok := n.(*ast.IntegerNode); ok {
		if x, ok := i.Value.(int64); ok && x == 0 {
			v.SetInt(0)
			return
		}
		d.errorf(n, path, nil, "want a duration with its unit (\"250ms\", \"30s\", \"1m\"), got %s", describe(n))
		return
	}
	s, ok := text(n)
	if !ok {
		d.errorf(n, path, nil, "want a duration (\"250ms\", \"30s\", \"1m\"), got %s", describe(n))
		return
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		d.errorf(n, path, nil, "%q is not a duration (write \"250ms\", \"30s\", \"1m\")", s)
		return
	}
	if dur < 0 {
		d.errorf(n, path, nil, "must not be negative, got %v", dur)
		return
	}
	v.SetInt(int64(dur))
}

// pairs returns a mapping's entries, or false when n is not a mapping.
func pairs(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}, true
	}
	return nil, false
}

// keyOf returns a mapping entry's key as text.
func (d *decoder) keyOf(mv *ast.MappingValueNode, path string) (string, bool) {
	var k ast.Node = mv.Key
	if mk, ok := k.(*ast.MappingKeyNode); ok {
		k = mk.Value
	}
	k = d.resolve(k, path)
	if k == nil {
		return "", false
	}
	if mk, ok := k.(ast.MapKeyNode); ok && mk.IsMergeKey() {
		d.errorf(k, path, nil, "merge keys (<<) are not supported: write the fields out")
		return "", false
	}
	s, ok := text(k)
	if !ok {
		d.errorf(k, path, nil, "a key must be text, got %s", describe(k))
		return "", false
	}
	return s, true
}

func (d *decoder) structure(n ast.Node, v reflect.Value, path string) {
	entries, ok := pairs(n)
	if !ok {
		d.errorf(n, path, nil, "want a section of fields, got %s", describe(n))
		return
	}
	fs := fieldsOf(v.Type())
	seen := map[string]bool{}
	for _, mv := range entries {
		name, ok := d.keyOf(mv, path)
		if !ok {
			continue
		}
		fp := join(path, name)
		idx, known := fs.index[name]
		if !known {
			d.errorf(mv.Key, fp, fs.names, "unknown field %q", name)
			continue
		}
		if seen[name] {
			d.errorf(mv.Key, fp, nil, "%q is set twice", name)
			continue
		}
		seen[name] = true
		d.pos[fp] = nodePos(mv.Value)
		if _, null := mv.Value.(*ast.NullNode); null || mv.Value == nil {
			d.pos[fp] = nodePos(mv.Key)
		}
		d.decode(mv.Value, v.FieldByIndex(idx), fp)
	}
}

func (d *decoder) mapping(n ast.Node, v reflect.Value, path string) {
	entries, ok := pairs(n)
	if !ok {
		d.errorf(n, path, nil, "want a mapping, got %s", describe(n))
		return
	}
	t := v.Type()
	keyWords := enums[t.Key()]
	if keyWords == nil && t.Key().Kind() != reflect.String {
		d.errorf(n, path, nil, "cannot be set from a file (a %v)", t)
		return
	}
	m := reflect.MakeMapWithSize(t, len(entries))
	for _, mv := range entries {
		k, ok := d.keyOf(mv, path)
		if !ok {
			continue
		}
		kp := path + "[" + strconv.Quote(k) + "]"
		var kv reflect.Value
		if keyWords != nil {
			w, ok := keyWords.parse(k)
			if !ok {
				d.errorf(mv.Key, kp, keyWords.words, "unknown key %q", k)
				continue
			}
			kv = w
			kp = path + "." + k
		} else {
			kv = reflect.ValueOf(k).Convert(t.Key())
		}
		if m.MapIndex(kv).IsValid() {
			d.errorf(mv.Key, kp, nil, "%q is set twice", k)
			continue
		}
		d.pos[kp] = nodePos(mv.Value)
		e := reflect.New(t.Elem()).Elem()
		d.decode(mv.Value, e, kp)
		m.SetMapIndex(kv, e)
	}
	v.Set(m)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// text returns a scalar's text when the file wrote text.
func text(n ast.Node) (string, bool) {
	switch s := n.(type) {
	case *ast.StringNode:
		return s.Value, true
	case *ast.LiteralNode:
		if s.Value != nil {
			return s.Value.Value, true
		}
	}
	return "", false
}

// describe says what the file wrote, for "want X, got Y".
func describe(n ast.Node) string {
	switch s := n.(type) {
	case *ast.StringNode:
		return strconv.Quote(s.Value)
	case *ast.LiteralNode:
		return "a block of text"
	case *ast.IntegerNode:
		return "the number " + s.GetToken().Value
	case *ast.FloatNode:
		return "the number " + s.GetToken().Value
	case *ast.InfinityNode, *ast.NanNode:
		return s.GetToken().Value
	case *ast.BoolNode:
		return strconv.FormatBool(s.Value)
	case *ast.NullNode:
		return "nothing"
	case *ast.SequenceNode:
		return "a list"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a section of fields"
	}
	return "a " + strings.ToLower(n.Type().String())
}

// fields is a struct type's fields by their names in the file, embedded
// structs inlined.
type fields struct {
	index map[string][]int
	names []string
}

var fieldCache sync.Map // reflect.Type → *fields

func fieldsOf(t reflect.Type) *fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fields)
	}
	fs := &fields{index: map[string][]int{}}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			idx := append(append([]int(nil), prefix...), i)
			tag := sf.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			if sf.Anonymous && opts == "inline" {
				walk(sf.Type, idx)
				continue
			}
			if !sf.IsExported() || name == "-" || name == "" {
				continue
			}
			fs.index[name] = idx
			fs.names = append(fs.names, name)
		}
	}
	walk(t, nil)
	fieldCache.Store(t, fs)
	return fs
}

// related drops the checks' errors about fields that did not decode (or
// whose parts or sections did not): they would repeat the decoding error
// in other words ("unit is required" after "unknown value").
func related(decoded, checked Errors) Errors {
	if len(decoded) == 0 {
		return checked
	}
	var out Errors
	for _, c := range checked {
		keep := true
		for _, d := range decoded {
			if d.Path == "" || within(c.Path, d.Path) || within(d.Path, c.Path) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

// within reports whether path is base or a field, item or entry below it.
func within(path, base string) bool {
	if !strings.HasPrefix(path, base) {
		return false
	}
	if len(path) == len(base) || base == "" {
		return true
	}
	c := path[len(base)]
	return c == '.' || c == '['
}
