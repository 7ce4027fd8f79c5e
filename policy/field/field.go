// Package field is the error every sluice config decoder reports: which
// field, what is wrong with it, and on which line when the decoder knows.
// The policy engine, the dimensions plugin, the gateway's decK reader, the
// decision service and the Kong plugins all list their problems as Errors,
// so the CLI, the admin API and the logs print them alike.
package field

import (
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

// JSON describes an error of encoding/json decoding a config into Go
// values, at path (joined with the field the error names), in the user's
// words: "expected a list of strings, got an object", never Go's
// "[]string".
func JSON(path string, err error) Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		p, got := join(path, te.Field), te.Value
		if IsSecretPath(p) && strings.HasPrefix(got, "number ") {
			got = "number" // a secret's value is never quoted
		}
		return Error{Path: p, Message: "expected " + Kind(te.Type) + ", got " + jsonValue(got)}
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
func jsonValue(v string) string {
	switch {
	case v == "object":
		return "an object"
	case v == "array":
		return "a list"
	case v == "string":
		return "a string"
	case v == "bool":
		return "a boolean"
	case v == "null":
		return "null"
	case v == "number" || strings.HasPrefix(v, "number "):
		if n := strings.TrimPrefix(v, "number "); n != v {
			return "the number " + n
		}
		return "a number"
	}
	return v
}

// Kind names what a config field of Go type t holds, as its user writes
// it: "a string", "an integer", "a list of strings", "an object".
func Kind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + plural(Kind(t.Elem()))
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

// plural turns "a string" into "strings", "a list of strings" into "lists
// of strings".
func plural(k string) string {
	k = strings.TrimPrefix(strings.TrimPrefix(k, "a "), "an ")
	if rest, ok := strings.CutPrefix(k, "list of "); ok {
		return "lists of " + rest
	}
	return k + "s"
}
