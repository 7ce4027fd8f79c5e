package kongconf

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// obj walks one decoded mapping and records every problem under its field
// path. Fields read with the typed getters are marked as known; finish
// reports the rest as unknown.
type obj struct {
	path string
	m    map[string]any
	seen map[string]bool
	errs *errList
}

type errList struct{ list []field.Error }

func (e *errList) add(path, format string, args ...any) {
	e.list = append(e.list, field.Error{Path: path, Message: fmt.Sprintf(format, args...)})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// asObj returns v as a mapping, or nil after recording an error.
func asObj(v any, path string, errs *errList) *obj {
	m, ok := v.(map[string]any)
	if !ok {
		errs.add(path, "%s", field.Expected(path, field.Object, v))
		return nil
	}
	return &obj{path: path, m: m, seen: make(map[string]bool, len(m)), errs: errs}
}

func (o *obj) field(name string) string { return join(o.path, name) }

func (o *obj) get(name string) (any, bool) {
	o.seen[name] = true
	v, ok := o.m[name]
	if ok && v == nil {
		return nil, false // an explicit null is the same as absent, as in Kong
	}
	return v, ok
}

func (o *obj) has(name string) bool {
	v, ok := o.m[name]
	return ok && v != nil
}

// finish records every field no getter asked for, in name order.
func (o *obj) finish() {
	var unknown []string
	for k := range o.m {
		if !o.seen[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		o.errs.add(o.field(k), "unknown field")
	}
}

func (o *obj) str(name string) string {
	v, ok := o.get(name)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.String, v))
		return ""
	}
	return s
}

func (o *obj) boolean(name string, def bool) bool {
	v, ok := o.get(name)
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.Boolean, v))
		return def
	}
	return b
}

// integer reads a whole number in [lo, hi]; def when absent.
func (o *obj) integer(name string, def, lo, hi int64) int64 {
	v, ok := o.get(name)
	if !ok {
		return def
	}
	n, ok := toInt(v)
	if !ok {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.Integer, v))
		return def
	}
	if n < lo || n > hi {
		o.errs.add(o.field(name), "must be between %d and %d, got %d", lo, hi, n)
		return def
	}
	return n
}

func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case float64:
		if n != math.Trunc(n) || n > math.MaxInt64 || n < math.MinInt64 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

func (o *obj) list(name string) []any {
	v, ok := o.get(name)
	if !ok {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.List, v))
		return nil
	}
	return l
}

func (o *obj) strList(name string) []string {
	l := o.list(name)
	if l == nil {
		return nil
	}
	out := make([]string, 0, len(l))
	for i, v := range l {
		s, ok := v.(string)
		if !ok {
			o.errs.add(index(o.field(name), i), "%s", field.Expected(index(o.field(name), i), field.String, v))
			continue
		}
		out = append(out, s)
	}
	return out
}

// raw returns the field converted to JSON, the form plugins decode.
func (o *obj) raw(name string) json.RawMessage {
	v, ok := o.get(name)
	if !ok {
		return nil
	}
	if _, ok := v.(map[string]any); !ok {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.Object, v))
		return nil
	}
	v = normalize(v)
	if !o.finite(v, o.field(name)) {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		o.errs.add(o.field(name), "cannot be converted to JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		return nil
	}
	return b
}

// finite reports whether v holds only values JSON can carry, recording
// each infinity or NaN (YAML's .inf and .nan) at its path.
func (o *obj) finite(v any, path string) bool {
	ok := true
	walkLeaves(v, path, func(path string, leaf any) {
		f, isFloat := leaf.(float64)
		switch {
		case !isFloat:
		case math.IsNaN(f):
			o.errs.add(path, "%s", field.Expected(path, field.Number, f))
			ok = false
		case math.IsInf(f, 0):
			o.errs.add(path, "%s", field.Expected(path, field.Number, f))
			ok = false
		}
	})
	return ok
}

// walkLeaves calls leaf with the path and value of every scalar in v, map
// keys in sorted order.
func walkLeaves(v any, path string, leaf func(path string, v any)) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walkLeaves(t[k], join(path, k), leaf)
		}
	case []any:
		for i, x := range t {
			walkLeaves(x, index(path, i), leaf)
		}
	default:
		leaf(path, v)
	}
}

// normalize turns YAML's generic values into ones encoding/json accepts
// (maps with non-string keys become string-keyed).
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = normalize(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[fmt.Sprint(k)] = normalize(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalize(x)
		}
		return out
	}
	return v
}

// ref reads a foreign key: a string (name or id) or a mapping {id: ...} /
// {name: ...} / {username: ...} as decK writes them.
func (o *obj) ref(name string) string {
	v, ok := o.get(name)
	if !ok {
		return ""
	}
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		r := asObj(t, o.field(name), o.errs)
		s := ""
		for _, k := range []string{"id", "name", "username"} {
			if r.has(k) && s == "" {
				s = r.str(k)
			} else {
				r.str(k)
			}
		}
		r.finish()
		if s == "" {
			o.errs.add(o.field(name), "reference needs an id or a name")
		}
		return s
	}
	o.errs.add(o.field(name), "%s", field.Expected(o.field(name), "a name, an id or an object", v))
	return ""
}

func strings2lower(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}
