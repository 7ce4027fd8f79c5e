package field

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestJSONMessages(t *testing.T) {
	type conf struct {
		Names []string          `json:"names"`
		Hide  bool              `json:"hide"`
		N     int               `json:"n"`
		M     map[string]string `json:"m"`
		Grid  [][]int           `json:"grid"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"names":{}}`, "config.names: expected a list of strings, got an object"},
		{`{"hide":[]}`, "config.hide: expected true or false, got a list"},
		{`{"n":1.5}`, "config.n: expected an integer, got the number 1.5"},
		{`{"n":"1"}`, "config.n: expected an integer, got a string"},
		{`{"m":true}`, "config.m: expected an object, got true"},
		{`{"grid":[[1],1]}`, "config.grid[1]: expected a list of integers, got the number 1"},
		{`{"names":["a",false]}`, "config.names[1]: expected a string, got false"},
		{`{"names":`, "config: invalid JSON: unexpected end"},
		{`{"names":]`, "config: invalid JSON at byte 10"},
		{`[]`, "config: expected an object, got a list"},
	} {
		var c conf
		err := Decode("config", []byte(tc.in), &c)
		if err == nil {
			t.Fatalf("%s: no error", tc.in)
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{[][]int{}, "a list of lists of integers"},
		{(*bool)(nil), "true or false"},
		{[]bool{}, "a list of true or false values"},
		{[]float64{}, "a list of numbers"},
		{struct{}{}, "an object"},
	} {
		if got := KindOf(reflect.TypeOf(tc.v)); string(got) != tc.want {
			t.Errorf("KindOf(%T) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

type list []Error

func (l list) Error() string        { return "list" }
func (l list) FieldErrors() []Error { return l }

func TestOfAndUnder(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", list{{Path: "config.limit", Message: "required field missing"}, {Message: "empty"}, {Path: "[2]", Line: 3, Message: "x"}})
	fes, ok := Of(err)
	if !ok || len(fes) != 3 {
		t.Fatalf("Of = %v, %v", fes, ok)
	}
	var got []string
	for _, fe := range fes {
		got = append(got, fe.Under("plugins[0]").String())
	}
	want := []string{"plugins[0].config.limit: required field missing", "plugins[0]: empty", "line 3: plugins[0][2]: x"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, ok := Of(errors.New("plain")); ok {
		t.Fatal("Of found field errors in a plain error")
	}
}

// TestDecodeUnknownFieldPath: an unknown field is named by its full path,
// in records, embedded records, lists and maps.
func TestDecodeUnknownFieldPath(t *testing.T) {
	type record struct {
		Headers []string `json:"headers"`
	}
	type replace struct {
		record
		URI *string `json:"uri"`
	}
	type conf struct {
		Path    string             `json:"path"`
		Replace replace            `json:"replace"`
		Items   []record           `json:"items"`
		ByName  map[string]*record `json:"by_name"`
		Raw     json.RawMessage    `json:"raw"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"replace":{"headers":[],"path":"/x"}}`, "config.replace.path: unknown field"},
		{`{"path":"/", "replace":{"URI":"/a","path":"/x"}}`, "config.replace.path: unknown field"},
		{`{"items":[{"headers":[]},{"nope":1}]}`, "config.items[1].nope: unknown field"},
		{`{"by_name":{"a":{"nope":1}}}`, "config.by_name.a.nope: unknown field"},
		{`{"raw":{"x":1},"extra":2}`, "config.extra: unknown field"},
		{`{"replace":{"path":1}, "extra":2}`, "config.replace.path: unknown field"},
		{`{"replace":{"headers":{}}}`, "config.replace.headers: expected a list of strings, got an object"},
	} {
		var c conf
		err := Decode("config", []byte(tc.in), &c)
		if err == nil {
			t.Fatalf("%s: no error", tc.in)
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.in, got, tc.want)
		}
	}
	var c conf
	if err := Decode("config", []byte(`{"replace":{"uri":"/a"}}`), &c); err != nil || *c.Replace.URI != "/a" {
		t.Fatalf("valid config: %v, %+v", err, c)
	}
}
