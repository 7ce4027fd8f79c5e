package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityResponseTransformer is Kong's response-transformer PRIORITY.
const PriorityResponseTransformer = 800

// responseTransformer is Kong's response-transformer plugin: it changes
// the response headers and the top-level keys of a JSON object body
// (Content-Type application/json), by remove, rename, replace, add and
// append, in that order; json_types give the JSON type (string, number,
// boolean) of each replaced, added or appended value. Bodies of up to
// 16 MiB are transformed; larger ones pass unchanged (logged).
type responseTransformer struct {
	remove  rspLists
	rename  rspPairs
	replace rspPairs
	add     rspPairs
	append  rspPairs
	bodyOps bool
	log     func(msg string, args ...any)
}

type rspLists struct{ json, headers []string }

type rspPairs struct{ json, headers []rspPair }

type rspPair struct {
	name, value string
	typ         string // json_types entry, "" for string
}

type rspRecord struct {
	JSON      []string `json:"json"`
	JSONTypes []string `json:"json_types"`
	Headers   []string `json:"headers"`
}

type rspRemove struct {
	JSON    []string `json:"json"`
	Headers []string `json:"headers"`
}

type rspRename struct {
	JSON    []string `json:"json"`
	Headers []string `json:"headers"`
}

type responseTransformerConfig struct {
	Remove  rspRemove `json:"remove"`
	Rename  rspRename `json:"rename"`
	Replace rspRecord `json:"replace"`
	Add     rspRecord `json:"add"`
	Append  rspRecord `json:"append"`
}

func newResponseTransformer(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c responseTransformerConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	bad := func(path, msg string) { errs = append(errs, field.Error{Path: path, Message: msg}) }
	p := &responseTransformer{log: func(string, ...any) {}}
	if env.Logger != nil {
		p.log = env.Logger.Warn
	}
	p.remove = rspLists{c.Remove.JSON, c.Remove.Headers}
	pairs := func(op, kind string, list, types []string, headerNames bool) []rspPair {
		var out []rspPair
		for i, s := range list {
			path := fmt.Sprintf("config.%s.%s[%d]", op, kind, i)
			n, v := splitPair(s)
			if !strings.Contains(s, ":") || n == "" {
				bad(path, "invalid value: "+s)
				continue
			}
			if headerNames {
				for _, h := range []string{n, v} {
					if !validHeaderName(h) {
						bad(path, fmt.Sprintf("'%s' is not a valid header", h))
					}
				}
			}
			pr := rspPair{name: n, value: v}
			if i < len(types) {
				pr.typ = types[i]
			}
			out = append(out, pr)
		}
		return out
	}
	types := func(op string, ts []string) {
		for i, t := range ts {
			switch t {
			case "boolean", "number", "string":
			default:
				bad(fmt.Sprintf("config.%s.json_types[%d]", op, i), "expected one of: boolean, number, string")
			}
		}
	}
	p.rename = rspPairs{pairs("rename", "json", c.Rename.JSON, nil, false), pairs("rename", "headers", c.Rename.Headers, nil, true)}
	rec := func(op string, r rspRecord) rspPairs {
		types(op, r.JSONTypes)
		return rspPairs{pairs(op, "json", r.JSON, r.JSONTypes, false), pairs(op, "headers", r.Headers, nil, false)}
	}
	p.replace, p.add, p.append = rec("replace", c.Replace), rec("add", c.Add), rec("append", c.Append)
	p.bodyOps = len(p.remove.json)+len(p.rename.json)+len(p.replace.json)+len(p.add.json)+len(p.append.json) > 0
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// Access does nothing: the plugin works in the response phase.
func (p *responseTransformer) Access(x *Exchange) error { return nil }

func (p *responseTransformer) wantsBody(ct []byte) bool { return p.bodyOps && isJSONMedia(ct) }

// isJSONMedia reports whether a Content-Type is application/json (Kong
// compares the media type, parameters aside).
func isJSONMedia(ct []byte) bool {
	for part := range bytes.SplitSeq(ct, []byte(",")) {
		mt, _, _ := bytes.Cut(part, []byte(";"))
		if bytes.EqualFold(bytes.TrimSpace(mt), []byte("application/json")) {
			return true
		}
	}
	return false
}

func (p *responseTransformer) Filter(x *Exchange) {
	h := &x.ctx.Response.Header
	for _, n := range p.remove.headers {
		h.Del(n)
	}
	for _, kv := range p.rename.headers {
		if v := h.Peek(kv.name); v != nil {
			val := string(v)
			h.Del(kv.name)
			h.Set(kv.value, val)
		}
	}
	for _, kv := range p.replace.headers {
		if h.Peek(kv.name) != nil && kv.value != "" {
			h.Set(kv.name, kv.value)
		}
	}
	for _, kv := range p.add.headers {
		if h.Peek(kv.name) == nil && kv.value != "" {
			h.Set(kv.name, kv.value)
		}
	}
	for _, kv := range p.append.headers {
		h.Add(kv.name, kv.value)
	}
	if !p.bodyOps || !isJSONMedia(h.ContentType()) {
		return
	}
	if x.bodyUnfiltered || x.ctx.Response.IsBodyStream() {
		return // too large, or the upstream failed mid-body
	}
	out, err := p.transform(x.ctx.Response.Body())
	if err != nil {
		p.log("response-transformer: body transform failed: body sent unchanged", "request_id", x.RequestID(), "error", err.Error())
		return
	}
	x.ctx.Response.SetBody(out)
}

// jsonValue is a configured value as the JSON type typ gives: a number
// (nil when it is not one), a boolean ("true" is true, anything else
// false) or the string.
func jsonValue(v, typ string) any {
	switch typ {
	case "number":
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil
		}
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	case "boolean":
		return v == "true"
	}
	return v
}

func (p *responseTransformer) transform(body []byte) ([]byte, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("failed parsing json body")
	}
	for _, n := range p.remove.json {
		delete(obj, n)
	}
	for _, kv := range p.rename.json {
		if v, ok := obj[kv.name]; ok && v != nil && kv.value != "" {
			delete(obj, kv.name)
			obj[kv.value] = v
		}
	}
	for _, kv := range p.replace.json {
		if v := jsonValue(kv.value, kv.typ); truthy(obj[kv.name]) && v != nil && kv.value != "" {
			obj[kv.name] = v
		}
	}
	for _, kv := range p.add.json {
		if v := jsonValue(kv.value, kv.typ); !truthy(obj[kv.name]) && v != nil && kv.value != "" {
			obj[kv.name] = v
		}
	}
	for _, kv := range p.append.json {
		v := jsonValue(kv.value, kv.typ)
		if v == nil || kv.value == "" {
			continue
		}
		switch old := obj[kv.name].(type) {
		case string:
			obj[kv.name] = []any{old, v}
		case []any:
			obj[kv.name] = append(old, v)
		default:
			obj[kv.name] = []any{v}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("encoding the body: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
