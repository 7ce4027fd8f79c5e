package decision

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/policy/field"
)

// A decoder walks a YAML document node by node so that every problem is
// reported at once with its path and line, instead of stopping at the first
// one as yaml.Unmarshal does. YAML null is an absent field.
type decoder struct {
	errs     []field.Error
	mistyped map[string]bool // paths with a value of the wrong type
}

// add records an error at path. After a value of the wrong type (a
// message "expected ..."), nothing more is reported at its field: the
// checks that follow would only complain that it is empty or invalid.
func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	if d.mistyped[path] {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if strings.HasPrefix(msg, "expected ") {
		if d.mistyped == nil {
			d.mistyped = map[string]bool{}
		}
		d.mistyped[path] = true
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, field.Error{Path: path, Line: line, Message: msg})
}

// mistype records that n, at path, is not of kind want.
func (d *decoder) mistype(n *yaml.Node, path string, want field.Kind) {
	d.add(n, path, "%s", field.Expected(path, want, nodeValue(n)))
}

// nodeValue is n's value as field.Expected describes it: a scalar
// decoded, an empty list or object for a sequence or a mapping.
func nodeValue(n *yaml.Node) any {
	switch {
	case n == nil:
		return nil
	case n.Kind == yaml.MappingNode:
		return map[string]any{}
	case n.Kind == yaml.SequenceNode:
		return []any{}
	}
	var v any
	if n.Decode(&v) != nil {
		return "" // a scalar YAML cannot decode is described as a string
	}
	return v
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// resolve follows aliases and unwraps documents.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// mapping is one YAML mapping whose fields are consumed by the typed
// getters; done reports the fields nobody asked for.
type mapping struct {
	d      *decoder
	path   string
	node   *yaml.Node
	keys   []*yaml.Node
	fields map[string]*yaml.Node
	used   map[string]bool
}

// mapping decodes n as a mapping; it returns nil (after recording an error)
// when n is something else. Duplicate keys are errors: with yaml.Unmarshal
// the last one would silently win.
func (d *decoder) mapping(path string, n *yaml.Node) *mapping {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		d.mistype(n, path, field.Object)
		return nil
	}
	m := &mapping{d: d, path: path, node: n, fields: map[string]*yaml.Node{}, used: map[string]bool{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k == nil || k.Kind != yaml.ScalarNode {
			d.add(n.Content[i], path, "mapping keys must be strings")
			continue
		}
		if _, dup := m.fields[k.Value]; dup {
			d.add(k, joinPath(path, k.Value), "duplicate field")
			continue
		}
		m.keys = append(m.keys, k)
		m.fields[k.Value] = n.Content[i+1]
	}
	return m
}

// field returns the value node of name, or nil when it is absent or null.
func (m *mapping) field(name string) *yaml.Node {
	m.used[name] = true
	n := resolve(m.fields[name])
	if isNull(n) {
		return nil
	}
	return n
}

func (m *mapping) has(name string) bool { return m.field(name) != nil }

func (m *mapping) str(name string) string {
	n := m.field(name)
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		m.d.mistype(n, joinPath(m.path, name), field.String)
		return ""
	}
	return n.Value
}

// scalar returns the text of a scalar field as written: a number or a
// boolean is its text ("200", "true"), as envoyproxy/ratelimit reads a
// descriptor's key and value.
func (m *mapping) scalar(name string) string {
	n := m.field(name)
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		m.d.mistype(n, joinPath(m.path, name), field.String)
		return ""
	}
	return n.Value
}

func (m *mapping) boolean(name string) bool {
	n := m.field(name)
	if n == nil {
		return false
	}
	if n.Kind == yaml.ScalarNode && n.Style == 0 && n.Tag == "!!str" {
		// envoyproxy/ratelimit reads its files as YAML 1.1, where these
		// plain words are booleans too.
		switch n.Value {
		case "yes", "Yes", "YES", "on", "On", "ON", "y", "Y":
			return true
		case "no", "No", "NO", "off", "Off", "OFF", "n", "N":
			return false
		}
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		m.d.mistype(n, joinPath(m.path, name), field.Boolean)
		return false
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
}

// uint32 decodes a non-negative integer that fits 32 bits.
func (m *mapping) uint32(name string) (uint32, bool) {
	n := m.field(name)
	if n == nil {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		m.d.mistype(n, joinPath(m.path, name), field.Integer)
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < 0 || v > math.MaxUint32 {
		m.d.add(n, joinPath(m.path, name), "expected an integer from 0 to %d, got %s", uint32(math.MaxUint32), n.Value)
		return 0, false
	}
	return uint32(v), true
}

// seq returns the items of a sequence field, or nil when absent.
func (m *mapping) seq(name string) []*yaml.Node {
	n := m.field(name)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		m.d.mistype(n, joinPath(m.path, name), field.List)
		return nil
	}
	return n.Content
}

// done records an error for every field that no getter asked for.
func (m *mapping) done() {
	for _, k := range m.keys {
		if !m.used[k.Value] {
			m.d.add(k, joinPath(m.path, k.Value), "unknown field")
		}
	}
}
