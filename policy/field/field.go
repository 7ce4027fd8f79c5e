// Package field is the error every sluice config decoder reports: which
// field, what is wrong with it, and on which line when the decoder knows.
// The policy engine, the dimensions plugin, the gateway's decK reader, the
// decision service and the Kong plugins all list their problems as Errors,
// so the CLI, the admin API and the logs print them alike.
package field

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// An Error is one problem of a configuration.
type Error struct {
	// Path names the field, as in "config.limit[1]" or
	// "domains[0].descriptors[2].rate_limit.unit" (indexes count from 0);
	// empty for a problem of the document as a whole.
	Path string
	// Line is the 1-based line of the field in its file; 0 when unknown.
	Line int
	// Message says what is wrong, in the words of the config's user.
	Message string
}

// String is "line L: path: message", without the parts that are unknown.
func (e Error) String() string {
	s := ""
	if e.Line > 0 {
		s = "line " + strconv.Itoa(e.Line) + ": "
	}
	if e.Path != "" {
		s += e.Path + ": "
	}
	return s + e.Message
}

// Error returns e.String().
func (e Error) Error() string { return e.String() }

// Under returns e with its path below prefix.
func (e Error) Under(prefix string) Error {
	switch {
	case prefix == "":
	case e.Path == "":
		e.Path = prefix
	case strings.HasPrefix(e.Path, "["):
		e.Path = prefix + e.Path
	default:
		e.Path = prefix + "." + e.Path
	}
	return e
}

// Of returns the field errors of the first error in err's chain that
// lists them (a FieldErrors() []Error method, which every config error of
// sluice has), or false.
func Of(err error) ([]Error, bool) {
	var l interface{ FieldErrors() []Error }
	if !errors.As(err, &l) {
		return nil, false
	}
	return l.FieldErrors(), true
}

// Decode decodes the JSON config data into dst strictly (an unknown field
// is an error) and describes a problem as JSON does, at path; the error
// is an Error. The field of an unknown name or of a value of the wrong
// kind is named by its full path, list indexes included
// ("config.items[2].headers"), however deep in objects and lists it is.
func Decode(path string, data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		// One value only: anything after it is a mistake.
		end := dec.InputOffset()
		if _, terr := dec.Token(); terr != io.EOF {
			return Error{Path: path, Message: "invalid JSON at byte " + strconv.FormatInt(end, 10) + ": data after the value"}
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		te.Field = withoutEmbedded(reflect.TypeOf(dst), te.Field)
	}
	fe := jsonError(path, err)
	if te != nil || fe.Message == "unknown field" {
		if p, ok := firstProblem(path, data, reflect.TypeOf(dst)); ok && p.fits(fe, te) {
			return p.Error
		}
	}
	return fe
}

// withoutEmbedded drops from an encoding/json error's field path
// ("replace.rtRecord.headers") the Go names of embedded structs, which
// the config's user never writes.
func withoutEmbedded(t reflect.Type, path string) string {
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return path
		}
		if f, ok := structField(t, seg); ok {
			out, t = append(out, seg), f.Type
		} else if f, ok := t.FieldByName(seg); ok && f.Anonymous {
			t = f.Type
		} else {
			return path
		}
	}
	return strings.Join(out, ".")
}

// A problem is the first field of a document, in document order, that a
// Go value cannot hold: an unknown name or a value of the wrong kind.
type problem struct {
	Error
	unknown bool
}

// fits reports whether p is the problem encoding/json reported as fe (te
// when it is a type error): the same kind of problem at the same field,
// encoding/json's path lacking only the indexes.
func (p problem) fits(fe Error, te *json.UnmarshalTypeError) bool {
	if p.unknown {
		return te == nil && lastName(p.Path) == lastName(fe.Path)
	}
	return te != nil && withoutIndexes(p.Path) == withoutIndexes(fe.Path)
}

// lastName is the last field name of path.
func lastName(path string) string {
	return path[strings.LastIndexByte(path, '.')+1:]
}

// withoutIndexes drops the list indexes of path ("a[2].b[0]" is "a.b").
func withoutIndexes(path string) string {
	var b strings.Builder
	depth := 0
	for _, c := range path {
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case depth == 0:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// firstProblem returns the first field in data, in document order, that
// a value of type t has no field for or cannot hold, as encoding/json
// finds it; false when there is none or a value decodes itself.
func firstProblem(path string, data []byte, t reflect.Type) (problem, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
		return problem{}, false
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" || t.Kind() == reflect.Interface {
		return problem{}, false
	}
	if !holds(t, data) {
		return problem{Error: Error{Path: path, Message: Expected(path, KindOf(t), json.RawMessage(data))}}, true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	switch data[0] {
	case '{':
		if t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
			return problem{}, false
		}
		dec.Token()
		for dec.More() {
			k, err := dec.Token()
			var v json.RawMessage
			if err != nil || dec.Decode(&v) != nil {
				return problem{}, false
			}
			key, _ := k.(string)
			var ft reflect.Type
			if t.Kind() == reflect.Map {
				ft = t.Elem()
			} else if f, ok := structField(t, key); ok {
				ft = f.Type
			} else {
				return problem{Error: Error{Path: join(path, key), Message: "unknown field"}, unknown: true}, true
			}
			if p, ok := firstProblem(join(path, key), v, ft); ok {
				return p, true
			}
		}
	case '[':
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return problem{}, false
		}
		dec.Token()
		for i := 0; dec.More(); i++ {
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return problem{}, false
			}
			if p, ok := firstProblem(path+"["+strconv.Itoa(i)+"]", v, t.Elem()); ok {
				return p, true
			}
		}
	}
	return problem{}, false
}

// holds reports whether encoding/json decodes the JSON value raw (not
// null) into a value of type t (not an interface) without a type error.
func holds(t reflect.Type, raw []byte) bool {
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		if raw[0] == '"' {
			return true
		}
	}
	switch raw[0] {
	case '{':
		return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
	case '[':
		return t.Kind() == reflect.Slice || t.Kind() == reflect.Array
	case '"':
		return t.Kind() == reflect.String || t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
	case 't', 'f':
		return t.Kind() == reflect.Bool
	}
	s := string(raw)
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err := strconv.ParseInt(s, 10, t.Bits())
		return err == nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		_, err := strconv.ParseUint(s, 10, t.Bits())
		return err == nil
	case reflect.Float32, reflect.Float64:
		_, err := strconv.ParseFloat(s, t.Bits())
		return err == nil
	case reflect.String:
		return t == reflect.TypeFor[json.Number]()
	}
	return false
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// structField finds the field of struct type t that encoding/json decodes
// the key into: by its name (tag or Go name) exactly, else ignoring case;
// the fields of embedded structs count as t's own.
func structField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold reflect.StructField
	found := false
	var walk func(t reflect.Type) bool
	walk = func(t reflect.Type) bool {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				if walk(ft) {
					return true
				}
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if name == key {
				fold, found = f, true
				return true
			}
			if !found && strings.EqualFold(name, key) {
				fold, found = f, true
			}
		}
		return false
	}
	walk(t)
	return fold, found
}

// jsonError describes an error of encoding/json decoding a config into
// Go values, at path (joined with the field the error names), in the
// user's words. encoding/json does not say where an unknown field is,
// nor a wrong value's list index: Decode finds them.
func jsonError(path string, err error) Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		p := join(path, te.Field)
		return Error{Path: p, Message: "expected " + string(KindOf(te.Type)) + ", got " + jsonValue(p, te.Value)}
	case errors.As(err, &se) && se.Error() != "unexpected end of JSON input":
		return Error{Path: path, Message: "invalid JSON at byte " + strconv.FormatInt(se.Offset, 10)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return Error{Path: join(path, name), Message: "unknown field"}
	case se != nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return Error{Path: path, Message: "invalid JSON: unexpected end"}
	}
	return Error{Path: path, Message: strings.TrimPrefix(err.Error(), "json: ")}
}

func join(path, name string) string {
	switch {
	case name == "":
		return path
	case path == "":
		return name
	}
	return path + "." + name
}

// jsonValue names a JSON value kind as encoding/json reports it.
func jsonValue(path, v string) string {
	switch {
	case v == "object":
		return "an object"
	case v == "array":
		return "a list"
	case v == "string":
		return "a string"
	case v == "bool":
		return "true or false"
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		return number(path, strings.TrimPrefix(v, "number "))
	}
	return v
}
