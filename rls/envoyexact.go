package rls

// Values held exactly: the YAML library converts what it can (2.5 into a
// whole number as 2, "5" into 5, 010 into the text "8"), which would serve
// a limit other than the one written. The file's tree is checked against
// the fields' kinds first, each wrong value refused at its position.

import (
	"math"
	"strconv"

	"github.com/goccy/go-yaml/ast"

	"github.com/loadshed/loadshed/config"
)

type kind int

const (
	kindText kind = iota
	kindWhole
	kindUint32
	kindNumber
	kindList   // of the element fields
	kindFields // a section of the element fields
)

type field struct {
	kind kind
	of   map[string]field
}

var (
	rateFields = map[string]field{
		"requests_per_unit": {kind: kindUint32}, "unit": {kind: kindText}, "name": {kind: kindText},
		"replaces":        {kind: kindList, of: map[string]field{"name": {kind: kindText}}},
		"unit_multiplier": {kind: kindWhole}, "period": {kind: kindText}, "algorithm": {kind: kindText},
		"burst": {kind: kindWhole}, "mode": {kind: kindText}, "overage": {kind: kindNumber},
		"overage_for": {kind: kindText}, "overage_cooldown": {kind: kindText},
	}
	descriptorFields = map[string]field{
		"key": {kind: kindText}, "value": {kind: kindText},
		"rate_limit":  {kind: kindFields, of: rateFields},
		"rate_limits": {kind: kindList, of: rateFields},
	}
	rootFields = map[string]field{"domain": {kind: kindText}}
)

func init() {
	descriptorFields["descriptors"] = field{kind: kindList, of: descriptorFields}
	rootFields["descriptors"] = field{kind: kindList, of: descriptorFields}
}

// exact checks the values of section n against fields; seen keeps a value
// an alias repeats from being checked, and refused, twice.
func (p *envoyParser) exact(n ast.Node, fields map[string]field, path string, seen map[ast.Node]bool) {
	n = p.resolve(n)
	m, ok := n.(ast.MapNode)
	if !ok || seen[n] {
		return
	}
	seen[n] = true
	for it := m.MapRange(); it.Next(); {
		k := it.Key()
		if k == nil || k.GetToken() == nil {
			continue
		}
		name := k.GetToken().Value
		f, known := fields[name]
		if !known {
			continue // the decoder refuses unknown fields
		}
		at := name
		if path != "" {
			at = path + "." + name
		}
		v := p.resolve(it.Value())
		switch f.kind {
		case kindFields:
			p.exact(v, f.of, at, seen)
		case kindList:
			if seq, ok := v.(*ast.SequenceNode); ok && !seen[seq] {
				seen[seq] = true
				for i, item := range seq.Values {
					p.exact(item, f.of, at+"["+strconv.Itoa(i)+"]", seen)
				}
			}
		default:
			if msg := inexact(v, f.kind); msg != "" {
				p.errs = append(p.errs, nodeError(p.name, v, at, msg))
			}
		}
	}
}

// resolve follows anchors and tags to the value; an alias, to the value
// its anchor names (the check needs no expansion: it sees each value once).
func (p *envoyParser) resolve(n ast.Node) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		case *ast.AliasNode:
			if v.Value == nil {
				return nil
			}
			n = p.anchor(v.Value.GetToken().Value)
		default:
			return n
		}
	}
	return n
}

func (p *envoyParser) anchor(name string) ast.Node {
	if p.anchors == nil {
		p.anchors = map[string]ast.Node{}
		for _, doc := range p.file.Docs {
			ast.Walk(anchorCollector(p.anchors), doc)
		}
	}
	return p.anchors[name]
}

// anchorCollector records each anchor's value; a name anchored twice keeps
// its last value, a shortcut the check can take since an alias the decoder
// cannot resolve is refused there.
type anchorCollector map[string]ast.Node

func (a anchorCollector) Visit(n ast.Node) ast.Visitor {
	if an, ok := n.(*ast.AnchorNode); ok && an.Name != nil {
		a[an.Name.GetToken().Value] = an.Value
	}
	return a
}

// inexact says why n's value cannot be held exactly by a field of kind k,
// or "" when it can.
func inexact(n ast.Node, k kind) string {
	switch k {
	case kindText:
		switch v := n.(type) {
		case nil, *ast.NullNode, *ast.StringNode, *ast.LiteralNode:
			return ""
		case *ast.IntegerNode:
			if i, ok := v.Value.(int64); ok && strconv.FormatInt(i, 10) == v.GetToken().Value {
				return ""
			}
			if u, ok := v.Value.(uint64); ok && strconv.FormatUint(u, 10) == v.GetToken().Value {
				return ""
			}
		case *ast.BoolNode:
			if strconv.FormatBool(v.Value) == v.GetToken().Value {
				return ""
			}
		}
		return "want text, got " + describeNode(n) + ", which would be read as other text (quote it)"
	case kindWhole, kindUint32:
		i, ok := n.(*ast.IntegerNode)
		if !ok {
			return "want a whole number, got " + describeNode(n)
		}
		if k == kindUint32 {
			switch v := i.Value.(type) {
			case int64:
				if v < 0 || v > math.MaxUint32 {
					return "want a whole number from 0 to 4294967295, got " + i.GetToken().Value
				}
			case uint64:
				if v > math.MaxUint32 {
					return "want a whole number from 0 to 4294967295, got " + i.GetToken().Value
				}
			}
		}
		if v, ok := i.Value.(uint64); ok && v > math.MaxInt64 {
			return i.GetToken().Value + " is too large"
		}
		return ""
	case kindNumber:
		switch n.(type) {
		case *ast.IntegerNode, *ast.FloatNode:
			return ""
		}
		return "want a number, got " + describeNode(n)
	}
	return ""
}

func describeNode(n ast.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.(type) {
	case *ast.StringNode:
		return strconv.Quote(n.GetToken().Value)
	case *ast.SequenceNode:
		return "a list"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a section of fields"
	case *ast.NullNode:
		return "nothing"
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return "a " + n.Type().String()
}

func nodeError(file string, n ast.Node, path, msg string) *config.Error {
	e := &config.Error{File: file, Path: path, Msg: msg, Line: 1, Column: 1}
	if n != nil {
		if tk := n.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
		}
	}
	return e
}
