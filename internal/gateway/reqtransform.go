package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityRequestTransformer is Kong's request-transformer PRIORITY.
const PriorityRequestTransformer = 801

// templateExpr finds a Kong template expression ("$(headers.x)") in a
// value, as Kong's request-transformer does.
var templateExpr = regexp.MustCompile(`\$\(.*\)`)

// requestTransformer is Kong's request-transformer plugin: it changes the
// upstream request's path (replace.uri), method (http_method), headers,
// query string and body (JSON or form-urlencoded), in that order, each by
// remove, rename, replace, add and append. Values are taken literally:
// template expressions are a config error. multipart/form-data bodies
// pass unchanged (logged once per plugin instance).
type requestTransformer struct {
	method  string
	uri     *string
	remove  rtLists
	rename  rtPairs
	replace rtPairs
	add     rtPairs
	append  rtPairs
	bodyOps bool
	log     func(msg string, args ...any)
	warned  sync.Once
	maxBody int // the gateway's request body limit
}

type rtLists struct{ body, headers, query []string }

type rtPairs struct{ body, headers, query []rtPair }

type rtPair struct{ name, value string }

type rtRecord struct {
	Body        []string `json:"body"`
	Headers     []string `json:"headers"`
	Querystring []string `json:"querystring"`
}

type rtReplace struct {
	rtRecord
	URI *string `json:"uri"`
}

type requestTransformerConfig struct {
	HTTPMethod *string   `json:"http_method"`
	Remove     rtRecord  `json:"remove"`
	Rename     rtRecord  `json:"rename"`
	Replace    rtReplace `json:"replace"`
	Add        rtRecord  `json:"add"`
	Append     rtRecord  `json:"append"`
}

// splitPair splits "name:value" as Kong does (the name is up to the
// first colon; further colons right after it are dropped).
func splitPair(s string) (name, value string) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i+1:], ":")
}

func newRequestTransformer(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c requestTransformerConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	bad := func(path, msg string) { errs = append(errs, field.Error{Path: path, Message: msg}) }
	noTemplate := func(path, v string) {
		if templateExpr.MatchString(v) {
			bad(path, fmt.Sprintf("template expressions are not supported by sluice: '%s' (values are sent literally; remove the $(...) expression)", v))
		}
	}
	p := &requestTransformer{log: func(string, ...any) {}, maxBody: orInt(env.MaxBodySize, DefaultMaxRequestBodySize)}
	if env.Logger != nil {
		p.log = env.Logger.Warn
	}
	if c.HTTPMethod != nil {
		p.method = *c.HTTPMethod
		if p.method == "" || strings.ToUpper(p.method) != p.method || strings.ContainsFunc(p.method, func(r rune) bool { return r < 'A' || r > 'Z' }) {
			bad("config.http_method", "invalid value: "+p.method)
		}
	}
	if c.Replace.URI != nil {
		p.uri = c.Replace.URI
		noTemplate("config.replace.uri", *p.uri)
		if !strings.HasPrefix(*p.uri, "/") {
			// Kong fails each request at run time.
			bad("config.replace.uri", "must start with '/'")
		}
	}
	headerName := func(path, name string) {
		if !validHeaderName(name) {
			bad(path, fmt.Sprintf("'%s' is not a valid header", name))
		}
	}
	// remove: names (headers are checked as header names).
	for i, h := range c.Remove.Headers {
		n, _ := splitPair(h)
		headerName(fmt.Sprintf("config.remove.headers[%d]", i), n)
	}
	p.remove = rtLists{c.Remove.Body, c.Remove.Headers, c.Remove.Querystring}
	pairs := func(op, kind string, list []string, headerValue bool) []rtPair {
		var out []rtPair
		for i, s := range list {
			path := fmt.Sprintf("config.%s.%s[%d]", op, kind, i)
			n, v := splitPair(s)
			switch {
			case kind == "headers" && !strings.Contains(s, ":") || kind == "headers" && n == "":
				bad(path, "invalid value: "+s)
				continue
			case kind == "headers":
				headerName(path, n)
				if headerValue {
					headerName(path, v)
				}
			case v == "":
				bad(path, fmt.Sprintf("key '%s' has no value", n))
				continue
			}
			noTemplate(path, v)
			out = append(out, rtPair{n, v})
		}
		return out
	}
	rec := func(op string, r rtRecord) rtPairs {
		return rtPairs{pairs(op, "body", r.Body, false), pairs(op, "headers", r.Headers, op == "rename"),
			pairs(op, "querystring", r.Querystring, false)}
	}
	p.rename, p.replace, p.add, p.append = rec("rename", c.Rename), rec("replace", c.Replace.rtRecord), rec("add", c.Add), rec("append", c.Append)
	p.bodyOps = len(p.remove.body)+len(p.rename.body)+len(p.replace.body)+len(p.add.body)+len(p.append.body) > 0
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func (p *requestTransformer) Access(x *Exchange) error {
	if p.uri != nil {
		u := *p.uri
		x.upstreamPath = &u
	}
	req := &x.ctx.Request
	if p.method != "" {
		req.Header.SetMethod(p.method)
		if (p.method == "GET" || p.method == "HEAD" || p.method == "TRACE") && bodyKind(req.Header.ContentType()) == "form" {
			body, err := p.readBody(x)
			if err != nil || x.responded {
				return err
			}
			if form, err := url.ParseQuery(string(body)); err == nil && len(form) > 0 {
				q := queryValues(x)
				for k, vs := range form {
					q[k] = append(q[k], vs...)
				}
				setQuery(x, q)
			}
		}
	}
	p.headers(x)
	if p.bodyOps {
		if err := p.body(x); err != nil || x.responded {
			return err
		}
	}
	p.query(x)
	x.Outcome("request-transformer", "transformed")
	return nil
}

func (p *requestTransformer) headers(x *Exchange) {
	h := &x.ctx.Request.Header
	for _, n := range p.remove.headers {
		n, _ = splitPair(n)
		if !strings.EqualFold(n, "host") {
			h.Del(n)
		}
	}
	for _, kv := range p.rename.headers {
		if strings.EqualFold(kv.name, "host") || strings.EqualFold(kv.value, "host") {
			continue
		}
		vs := peekAll(h, kv.name)
		if len(vs) == 0 {
			continue
		}
		h.Del(kv.name)
		h.Del(kv.value)
		for _, v := range vs {
			h.Add(kv.value, v)
		}
	}
	for _, kv := range p.replace.headers {
		if strings.EqualFold(kv.name, "host") {
			host := kv.value
			x.upstreamHost = &host
			continue
		}
		if len(peekAll(h, kv.name)) > 0 {
			h.Set(kv.name, kv.value)
		}
	}
	for _, kv := range p.add.headers {
		if !strings.EqualFold(kv.name, "host") && len(peekAll(h, kv.name)) == 0 {
			h.Set(kv.name, kv.value)
		}
	}
	for _, kv := range p.append.headers {
		if !strings.EqualFold(kv.name, "host") {
			h.Add(kv.name, kv.value)
		}
	}
}

func peekAll(h *fasthttp.RequestHeader, name string) []string {
	var out []string
	for _, v := range h.PeekAll(name) {
		out = append(out, string(v))
	}
	return out
}

// queryValues returns the request's query arguments.
func queryValues(x *Exchange) url.Values {
	q := url.Values{}
	for k, v := range x.ctx.QueryArgs().All() {
		q.Add(string(k), string(v))
	}
	return q
}

// setQuery replaces the upstream query string with q, its keys sorted
// (as Kong's set_query encodes them), spaces as %20.
func setQuery(x *Exchange, q url.Values) {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, v := range q[k] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(escapeQuery(k))
			b.WriteByte('=')
			b.WriteString(escapeQuery(v))
		}
	}
	x.ctx.Request.URI().SetQueryString(b.String())
	x.ctx.QueryArgs().Parse(b.String())
}

func escapeQuery(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

func (p *requestTransformer) query(x *Exchange) {
	if len(p.remove.query)+len(p.rename.query)+len(p.replace.query)+len(p.add.query)+len(p.append.query) == 0 {
		return
	}
	q := queryValues(x)
	for _, n := range p.remove.query {
		delete(q, n)
	}
	for _, kv := range p.rename.query {
		if v, ok := q[kv.name]; ok && kv.name != kv.value {
			delete(q, kv.name)
			q[kv.value] = v
		}
	}
	for _, kv := range p.replace.query {
		if _, ok := q[kv.name]; ok {
			q[kv.name] = []string{kv.value}
		}
	}
	for _, kv := range p.add.query {
		if _, ok := q[kv.name]; !ok {
			q[kv.name] = []string{kv.value}
		}
	}
	for _, kv := range p.append.query {
		q[kv.name] = append(q[kv.name], kv.value)
	}
	setQuery(x, q)
}

// bodyKind is "json", "form", "multipart" or "" for a Content-Type, as
// Kong tells them (a substring, any case).
func bodyKind(ct []byte) string {
	l := bytes.ToLower(ct)
	switch {
	case bytes.Contains(l, []byte("application/json")):
		return "json"
	case bytes.Contains(l, []byte("multipart/form-data")):
		return "multipart"
	case bytes.Contains(l, []byte("application/x-www-form-urlencoded")):
		return "form"
	}
	return ""
}

// readBody reads the whole request body (at most the gateway's body
// limit, which the server enforces) and keeps it as the upstream body.
func (p *requestTransformer) readBody(x *Exchange) ([]byte, error) {
	req := &x.ctx.Request
	if !req.IsBodyStream() {
		return req.Body(), nil
	}
	limit := int64(p.maxBody)
	if x.bodyLimited && x.bodyLimit < limit {
		limit = x.bodyLimit
	}
	b, err := io.ReadAll(io.LimitReader(req.BodyStream(), limit+1))
	if err != nil {
		return nil, fmt.Errorf("gateway: request-transformer: reading the request body: %w", err)
	}
	if int64(len(b)) > limit {
		x.RespondError(fasthttp.StatusRequestEntityTooLarge, "Request size limit exceeded")
		x.ctx.SetConnectionClose()
		return nil, nil
	}
	req.SetBody(b)
	return b, nil
}

func (p *requestTransformer) body(x *Exchange) error {
	kind := bodyKind(x.ctx.Request.Header.ContentType())
	switch kind {
	case "":
		return nil
	case "multipart":
		p.warned.Do(func() {
			p.log("request-transformer: multipart/form-data bodies are not transformed by sluice: passed unchanged", "request_id", x.RequestID())
		})
		return nil
	}
	body, err := p.readBody(x)
	if err != nil || x.responded {
		return err
	}
	var out []byte
	if kind == "json" {
		out = p.jsonBody(body)
	} else {
		out = p.formBody(body)
	}
	if out != nil {
		x.ctx.Request.SetBody(out)
		x.ctx.Request.Header.SetContentLength(len(out))
	}
	return nil
}

// jsonBody returns the transformed JSON object, or nil to leave the body
// as it is (not an object, or nothing changed).
func (p *requestTransformer) jsonBody(body []byte) []byte {
	params := map[string]any{}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &params); err != nil || params == nil {
			return nil
		}
	}
	changed := false
	if len(body) > 0 {
		for _, n := range p.remove.body {
			delete(params, n)
			changed = true
		}
		for _, kv := range p.rename.body {
			if v, ok := params[kv.name]; ok && kv.name != kv.value && v != nil {
				delete(params, kv.name)
				params[kv.value] = v
				changed = true
			}
		}
		for _, kv := range p.replace.body {
			if v, ok := params[kv.name]; ok && truthy(v) {
				params[kv.name] = kv.value
				changed = true
			}
		}
	}
	for _, kv := range p.add.body {
		if v, ok := params[kv.name]; !ok || !truthy(v) {
			params[kv.name] = kv.value
			changed = true
		}
	}
	for _, kv := range p.append.body {
		switch old := params[kv.name].(type) {
		case string:
			params[kv.name] = []any{old, kv.value}
		case []any:
			params[kv.name] = append(old, kv.value)
		default:
			params[kv.name] = []any{kv.value}
		}
		changed = true
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(params)
	if err != nil {
		return nil
	}
	return out
}

// truthy is Lua's truth of a decoded JSON value: all but null and false.
func truthy(v any) bool { return v != nil && v != false }

func (p *requestTransformer) formBody(body []byte) []byte {
	params, err := url.ParseQuery(string(body))
	if err != nil {
		return nil
	}
	changed := false
	if len(body) > 0 {
		for _, n := range p.remove.body {
			delete(params, n)
			changed = true
		}
		for _, kv := range p.rename.body {
			if v, ok := params[kv.name]; ok && kv.name != kv.value {
				delete(params, kv.name)
				params[kv.value] = v
				changed = true
			}
		}
		for _, kv := range p.replace.body {
			if _, ok := params[kv.name]; ok {
				params[kv.name] = []string{kv.value}
				changed = true
			}
		}
	}
	for _, kv := range p.add.body {
		if _, ok := params[kv.name]; !ok {
			params[kv.name] = []string{kv.value}
			changed = true
		}
	}
	for _, kv := range p.append.body {
		params[kv.name] = append(params[kv.name], kv.value)
		changed = true
	}
	if !changed {
		return nil
	}
	return []byte(params.Encode())
}
