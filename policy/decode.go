package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/kongname"
	"github.com/seed-008287da/sluice/policy/field"
)

// Kong's schema messages for missing and unknown fields; a value of the
// wrong kind is described as every sluice decoder does (field.Expected).
const (
	msgRequired   = "required field missing"
	msgUnknown    = "unknown field"
	msgEmptyStr   = "length must be at least 1"
	msgNotJSON    = "invalid JSON: "
	pathConfig    = "config"
	kindAbsent    = 0
	kindNull      = 1
	kindValue     = 2
	maxSafeNumber = 1 << 53
)

// decoder collects every error of one config.
type decoder struct{ errs []field.Error }

func (d *decoder) fail(path, msg string) {
	d.errs = append(d.errs, field.Error{Path: path, Message: msg})
}

// mistyped records that the value raw at path is not of kind want.
func (d *decoder) mistyped(path string, want field.Kind, raw json.RawMessage) {
	d.fail(path, field.Expected(path, want, raw))
}

// record opens a JSON object at path. It reports a type error and returns
// nil when raw is not an object.
func (d *decoder) record(path string, raw json.RawMessage) *fields {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.mistyped(path, field.Object, raw)
		return nil
	}
	return &fields{d: d, path: path, m: m}
}

// fields walks the members of one JSON object. Members that are never
// taken are reported as unknown by done, so decoding is strict.
type fields struct {
	d    *decoder
	path string
	m    map[string]json.RawMessage
}

func (f *fields) at(name string) string { return f.path + "." + name }

// take removes name from the object and says whether it was absent, null
// or a value.
func (f *fields) take(name string) (json.RawMessage, int) {
	raw, ok := f.m[name]
	if !ok {
		return nil, kindAbsent
	}
	delete(f.m, name)
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, kindNull
	}
	return raw, kindValue
}

// ignore accepts name without reading it (Kong-added keys).
func (f *fields) ignore(names ...string) {
	for _, n := range names {
		delete(f.m, n)
	}
}

// done reports every member that no field took, in name order.
func (f *fields) done() {
	names := make([]string, 0, len(f.m))
	for n := range f.m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		f.d.fail(f.at(n), msgUnknown)
	}
}

func asString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func asBool(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func asNumber(raw json.RawMessage) (float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

func isWhole(v float64) bool { return v == math.Trunc(v) && math.Abs(v) <= maxSafeNumber }

func asArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	var a []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// reqString reads a non-nullable string: absent keeps the default in dst,
// null is "required field missing".
func (f *fields) reqString(name string, dst *string, nonEmpty bool) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		f.d.fail(f.at(name), msgRequired)
	case kindValue:
		s, ok := asString(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at(name), field.String, raw)
		case nonEmpty && s == "":
			f.d.fail(f.at(name), msgEmptyStr)
		default:
			*dst = s
		}
	}
}

// optString reads a nullable string: absent keeps dst, null clears it.
func (f *fields) optString(name string, dst **string) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		*dst = nil
	case kindValue:
		s, ok := asString(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at(name), field.String, raw)
		case s == "":
			f.d.fail(f.at(name), msgEmptyStr)
		default:
			*dst = &s
		}
	}
}

// optChecked reads a nullable string as optString does, then reports
// check's message for a value it refuses.
func (f *fields) optChecked(name string, dst **string, check func(string) string) {
	f.optString(name, dst)
	if *dst != nil {
		if msg := check(**dst); msg != "" {
			f.d.fail(f.at(name), msg)
		}
	}
}

// checkHeaderName checks s as Kong's header_name type (kongname.CheckHeaderName).
func checkHeaderName(s string) string { return kongname.CheckHeaderName(s) }

// checkURLPath checks s as Kong's path type: it starts with '/', has no
// empty segment, holds only RFC 3986 path characters, and every '%'
// starts a percent-encoded byte.
func checkURLPath(s string) string {
	if !strings.HasPrefix(s, "/") {
		return "should start with: /"
	}
	if strings.Contains(s, "//") {
		return "must not have empty segments"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && !strings.ContainsRune("._~-/%:@!$&'()*+,;=", rune(c)) {
			return "invalid path: '" + s + "' (characters outside of the reserved list of RFC 3986 found)"
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			i += 2
			continue
		}
		return "invalid url-encoded value: '" + s[i:min(i+3, len(s))] + "'"
	}
	return ""
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// enum reads a string that must be one of allowed. A nullable enum is
// cleared by null; a non-nullable one reports "required field missing".
func (f *fields) enum(name string, dst **string, nullable bool, allowed ...string) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		if nullable {
			*dst = nil
		} else {
			f.d.fail(f.at(name), msgRequired)
		}
	case kindValue:
		s, ok := asString(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at(name), field.String, raw)
		case !slices.Contains(allowed, s):
			f.d.fail(f.at(name), enumMessage(allowed))
		default:
			*dst = &s
		}
	}
}

func enumMessage(allowed []string) string { return "expected one of: " + strings.Join(allowed, ", ") }

func (f *fields) reqBool(name string, dst *bool) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		f.d.fail(f.at(name), msgRequired)
	case kindValue:
		if b, ok := asBool(raw); ok {
			*dst = b
		} else {
			f.d.mistyped(f.at(name), field.Boolean, raw)
		}
	}
}

func (f *fields) reqNumber(name string, dst *float64) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		f.d.fail(f.at(name), msgRequired)
	case kindValue:
		if v, ok := asNumber(raw); ok {
			*dst = v
		} else {
			f.d.mistyped(f.at(name), field.Number, raw)
		}
	}
}

func (f *fields) optNumber(name string, dst **float64) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		*dst = nil
	case kindValue:
		if v, ok := asNumber(raw); ok {
			*dst = &v
		} else {
			f.d.mistyped(f.at(name), field.Number, raw)
		}
	}
}

// integer parses an integer in [lo, hi]; it reports Kong's range message.
func (f *fields) integer(path string, raw json.RawMessage, lo, hi int64) (int64, bool) {
	v, ok := asNumber(raw)
	if !ok || !isWhole(v) {
		f.d.mistyped(path, field.Integer, raw)
		return 0, false
	}
	if v < float64(lo) || v > float64(hi) {
		f.d.fail(path, "value should be between "+strconv.FormatInt(lo, 10)+" and "+strconv.FormatInt(hi, 10))
		return 0, false
	}
	return int64(v), true
}

func (f *fields) reqInt(name string, dst *int64, lo, hi int64) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		f.d.fail(f.at(name), msgRequired)
	case kindValue:
		if v, ok := f.integer(f.at(name), raw, lo, hi); ok {
			*dst = v
		}
	}
}

func (f *fields) optInt(name string, dst **int64, lo, hi int64) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		*dst = nil
	case kindValue:
		if v, ok := f.integer(f.at(name), raw, lo, hi); ok {
			*dst = &v
		}
	}
}

// numbers reads an array of numbers. present is false when the field is
// absent or null; valid is false when it holds something else.
func (f *fields) numbers(name string) (vs []float64, present, valid bool) {
	raw, k := f.take(name)
	if k != kindValue {
		return nil, false, false
	}
	items, ok := asArray(raw)
	if !ok {
		f.d.mistyped(f.at(name), field.ListOf(field.Number), raw)
		return nil, true, false
	}
	vs = make([]float64, len(items))
	valid = true
	for i, it := range items {
		v, ok := asNumber(it)
		if !ok {
			f.d.mistyped(f.at(name)+"["+strconv.Itoa(i)+"]", field.Number, it)
			valid = false
			continue
		}
		vs[i] = v
	}
	return vs, true, valid
}

// strings reads a nullable array of strings; each item must be one of
// allowed when allowed is not empty.
func (f *fields) strings(name string, dst *[]string, allowed ...string) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		*dst = nil
	case kindValue:
		items, ok := asArray(raw)
		if !ok {
			f.d.mistyped(f.at(name), field.ListOf(field.String), raw)
			return
		}
		out := make([]string, 0, len(items))
		for i, it := range items {
			p := f.at(name) + "[" + strconv.Itoa(i) + "]"
			s, ok := asString(it)
			switch {
			case !ok:
				f.d.mistyped(p, field.String, it)
			case len(allowed) > 0 && !slices.Contains(allowed, s):
				f.d.fail(p, enumMessage(allowed))
			case s == "":
				f.d.fail(p, msgEmptyStr)
			default:
				out = append(out, s)
			}
		}
		*dst = out
	}
}

// sub opens a nested record; absent or null returns nil without error.
func (f *fields) sub(name string) (*fields, int) {
	raw, k := f.take(name)
	if k != kindValue {
		return nil, k
	}
	return f.d.record(f.at(name), raw), k
}

// parseRoot opens the top-level config object.
func parseRoot(d *decoder, raw []byte) *fields {
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		msg := "unexpected end of input"
		if err != nil {
			msg = err.Error()
		}
		d.fail(pathConfig, msgNotJSON+strings.TrimPrefix(msg, "json: "))
		return nil
	}
	return d.record(pathConfig, raw)
}
