package field

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A Kind is what a config field holds, named as the config's user writes
// it in JSON or YAML ("a list of strings"), never as Go types it.
type Kind string

// The kinds of value a config holds.
const (
	String  Kind = "a string"
	Number  Kind = "a number"
	Integer Kind = "an integer"
	Boolean Kind = "true or false"
	List    Kind = "a list"
	Object  Kind = "an object"
)

// ListOf is a list of elements of kind k: "a list of strings".
func ListOf(k Kind) Kind {
	switch k {
	case Boolean:
		return "a list of true or false values"
	case List:
		return "a list of lists"
	}
	s := strings.TrimPrefix(strings.TrimPrefix(string(k), "a "), "an ")
	if rest, ok := strings.CutPrefix(s, "list of "); ok {
		return Kind("a list of lists of " + rest)
	}
	return Kind("a list of " + s + "s")
}

// KindOf is the kind of config value a Go value of type t decodes from.
func KindOf(t reflect.Type) Kind {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return Boolean
	case reflect.String:
		return String
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return Integer
	case reflect.Float32, reflect.Float64:
		return Number
	case reflect.Slice, reflect.Array:
		return ListOf(KindOf(t.Elem()))
	case reflect.Map, reflect.Struct:
		return Object
	}
	return "a value"
}

// Expected is the message for a value of the wrong kind at path, the one
// wording every decoder uses: "expected a list, got a string". got is
// the value as it was decoded from JSON or YAML into an any (nil, a bool,
// a number, a string, a []any, a map), or raw JSON as a json.RawMessage.
// A string is never quoted, nor a number at a path that holds a secret.
func Expected(path string, want Kind, got any) string {
	return "expected " + string(want) + ", got " + describe(path, got)
}

// describe names a decoded value for Expected.
func describe(path string, v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "an object"
	case time.Time:
		return "a timestamp"
	case json.RawMessage:
		return describeJSON(path, v)
	case []byte:
		return describeJSON(path, v)
	case json.Number:
		return number(path, string(v))
	case float64:
		if math.IsInf(v, 0) {
			return "an infinity"
		}
		if math.IsNaN(v) {
			return ".nan (not a number)"
		}
		return number(path, strconv.FormatFloat(v, 'g', -1, 64))
	case float32:
		return describe(path, float64(v))
	case int:
		return number(path, strconv.Itoa(v))
	case int64:
		return number(path, strconv.FormatInt(v, 10))
	case uint64:
		return number(path, strconv.FormatUint(v, 10))
	}
	return "a value of another kind"
}

// describeJSON names the JSON value raw.
func describeJSON(path string, raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f', 'n':
		return string(raw)
	}
	return number(path, string(raw))
}

// number names a number, by its text unless path holds a secret.
func number(path, text string) string {
	if IsSecretPath(path) || len(text) > 32 {
		return "a number"
	}
	return "the number " + text
}
