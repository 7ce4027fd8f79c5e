package dimensions

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/seed-008287da/sluice/policy/field"
)

// A decoder walks a JSON document field by field so that every problem can
// be reported at once with its path, instead of stopping at the first one
// as encoding/json does. JSON null is treated as an absent field, as Kong
// treats it.
type decoder struct {
	errs []field.Error
	// ovPaths are the field paths of the overrides decoded so far, so that
	// checks made after decoding name the item as it was written.
	ovPaths []string
}

// add records a problem at path. Only the first problem of a field is
// kept: a value that failed to decode is not reported again by the checks
// that run on the decoded config.
func (d *decoder) add(path, msg string) {
	for _, e := range d.errs {
		if e.Path == path {
			return
		}
	}
	d.errs = append(d.errs, field.Error{Path: path, Message: msg})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// object is one decoded JSON object whose fields are consumed by the typed
// getters; done reports the fields nobody asked for.
type object struct {
	d      *decoder
	path   string
	names  []string
	fields map[string]json.RawMessage
	used   map[string]bool
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// decodeObject parses raw as a JSON object. Duplicate names are errors: with
// encoding/json the last one would silently win.
func (d *decoder) decodeObject(path string, raw json.RawMessage) *object {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		d.add(path, field.Expected(path, field.Object, raw))
		return nil
	}
	o := &object{d: d, path: path, fields: map[string]json.RawMessage{}, used: map[string]bool{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			d.add(path, "invalid JSON: "+err.Error())
			return nil
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			d.add(join(path, name), "invalid JSON: "+err.Error())
			return nil
		}
		if _, dup := o.fields[name]; dup {
			d.add(join(path, name), "duplicate field")
			continue
		}
		o.names = append(o.names, name)
		o.fields[name] = v
	}
	if _, err := dec.Token(); err != nil {
		d.add(path, "invalid JSON: "+err.Error())
		return nil
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		d.add(path, "invalid JSON: data after the record")
		return nil
	}
	return o
}

// raw returns a field's value, marking it used; ok is false when the field
// is absent or null.
func (o *object) raw(name string) (json.RawMessage, bool) {
	o.used[name] = true
	v, ok := o.fields[name]
	if !ok || isNull(v) {
		return nil, false
	}
	return v, true
}

func (o *object) has(name string) bool {
	v, ok := o.fields[name]
	return ok && !isNull(v)
}

func (o *object) str(name string) (string, bool) {
	v, ok := o.raw(name)
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		o.d.add(join(o.path, name), field.Expected(join(o.path, name), field.String, v))
		return "", false
	}
	return s, true
}

func (o *object) boolean(name string) (bool, bool) {
	v, ok := o.raw(name)
	if !ok {
		return false, false
	}
	var b bool
	if json.Unmarshal(v, &b) != nil {
		o.d.add(join(o.path, name), field.Expected(join(o.path, name), field.Boolean, v))
		return false, false
	}
	return b, true
}

func (o *object) number(name string) (float64, bool) {
	v, ok := o.raw(name)
	if !ok {
		return 0, false
	}
	return o.d.number(join(o.path, name), v)
}

func (d *decoder) number(path string, v json.RawMessage) (float64, bool) {
	var f float64
	if json.Unmarshal(v, &f) != nil {
		d.add(path, field.Expected(path, field.Number, v))
		return 0, false
	}
	return f, true
}

func (o *object) integer(name string) (int, bool) {
	f, ok := o.number(name)
	if !ok {
		return 0, false
	}
	if f != float64(int(f)) || f > 1<<31 || f < -(1<<31) {
		o.d.add(join(o.path, name), field.Expected(join(o.path, name), field.Integer, f))
		return 0, false
	}
	return int(f), true
}

func (o *object) array(name string) ([]json.RawMessage, bool) {
	v, ok := o.raw(name)
	if !ok {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(v, &a) != nil {
		o.d.add(join(o.path, name), field.Expected(join(o.path, name), field.List, v))
		return nil, false
	}
	return a, true
}

func (o *object) record(name string) (*object, bool) {
	v, ok := o.raw(name)
	if !ok {
		return nil, false
	}
	r := o.d.decodeObject(join(o.path, name), v)
	return r, r != nil
}

func (o *object) strings(name string) ([]string, bool) {
	a, ok := o.array(name)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(a))
	for i, v := range a {
		var s string
		if json.Unmarshal(v, &s) != nil {
			o.d.add(index(join(o.path, name), i), field.Expected(index(join(o.path, name), i), field.String, v))
			continue
		}
		out = append(out, s)
	}
	return out, len(out) == len(a)
}

func (o *object) numbers(name string) ([]float64, bool) {
	a, ok := o.array(name)
	if !ok {
		return nil, false
	}
	out := make([]float64, 0, len(a))
	for i, v := range a {
		if f, ok := o.d.number(index(join(o.path, name), i), v); ok {
			out = append(out, f)
		}
	}
	return out, len(out) == len(a)
}

// done reports every field of o that no getter consumed, in document order.
func (o *object) done() {
	for _, n := range o.names {
		if !o.used[n] {
			o.d.add(join(o.path, n), "unknown field")
		}
	}
}
