package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-008287da/sluice/policy/field"
)

// bodyEchoUpstream answers with what it received: method, path, raw
// query, headers and body.
func bodyEchoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := map[string]string{}
		for k, v := range r.Header {
			hdr[strings.ToLower(k)] = strings.Join(v, ",")
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "echo")
		w.Header().Set("X-Remove-Me", "1")
		w.Header().Set("Vary", "Accept-Encoding")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery, "host": r.Host, "headers": hdr, "body": string(b),
		})
	}))
	t.Cleanup(s.Close)
	return s
}

type bodyEchoed struct {
	echoed
	Body string `json:"body"`
}

// doBody sends a request with a body and the given headers.
func doBody(t *testing.T, method, url, body string, hdr map[string]string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, string(b)}
}

// rawRequest writes raw bytes to addr ("127.0.0.1:port") and returns the
// response read until the server closes or a complete response arrives.
func rawRequest(t *testing.T, addr, raw string) (status int, header http.Header, body string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	for err == nil && res.StatusCode < 200 { // 100 Continue
		res, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", raw, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func wantKongError(t *testing.T, what string, r resp, status int, message string) {
	t.Helper()
	if r.status != status || !strings.HasPrefix(r.body, fmt.Sprintf(`{"message":%q`, message)) {
		t.Errorf("%s: %d %s, want %d {\"message\":%q...}", what, r.status, r.body, status, message)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("%s: content type %q", what, ct)
	}
}

func TestIPRestriction(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: denied
        paths: [/denied]
        plugins: [{name: ip-restriction, config: {deny: [127.0.0.0/8]}}]
      - name: custom
        paths: [/custom]
        plugins: [{name: ip-restriction, config: {allow: [10.0.0.0/8, "::1"], status: 401, message: go away}}]
      - name: allowed
        paths: [/allowed]
        plugins: [{name: ip-restriction, config: {allow: [127.0.0.1], deny: [192.168.0.0/16]}}]
      - name: both
        paths: [/both]
        plugins: [{name: ip-restriction, config: {allow: [127.0.0.0/8], deny: [127.0.0.1]}}]
`, up), Options{})
	wantKongError(t, "deny", do(t, "GET", base+"/denied", nil), 403, "Your IP address is not allowed")
	wantKongError(t, "not in allow, status and message", do(t, "GET", base+"/custom", nil), 401, "go away")
	if r := do(t, "GET", base+"/allowed", nil); r.status != 200 {
		t.Errorf("allowed: %d %s", r.status, r.body)
	}
	wantKongError(t, "deny wins over allow", do(t, "GET", base+"/both", nil), 403, "Your IP address is not allowed")
}

func TestBotDetection(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: default
        paths: [/default]
        plugins: [{name: bot-detection}]
      - name: lists
        paths: [/lists]
        plugins: [{name: bot-detection, config: {allow: ["^Go-http-client"], deny: ["^evil"]}}]
`, up), Options{})
	for _, ua := range []string{"Go-http-client/1.1", "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Python-urllib/3.1", "curl-crawler 1.0"} {
		wantKongError(t, "bad bot "+ua, do(t, "GET", base+"/default", map[string]string{"User-Agent": ua}), 403, "Forbidden")
	}
	for _, ua := range []string{"curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"} {
		if r := do(t, "GET", base+"/default", map[string]string{"User-Agent": ua}); r.status != 200 {
			t.Errorf("%s: %d %s", ua, r.status, r.body)
		}
	}
	if r := do(t, "GET", base+"/lists", nil); r.status != 200 {
		t.Errorf("allow list: %d %s", r.status, r.body)
	}
	wantKongError(t, "deny list", do(t, "GET", base+"/lists", map[string]string{"User-Agent": "evil/1"}), 403, "Forbidden")
	addr := strings.TrimPrefix(base, "http://")
	st, _, body := rawRequest(t, addr, "GET /default HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r\nUser-Agent: b\r\nConnection: close\r\n\r\n")
	if st != 400 || !strings.Contains(body, `"message":"Only one User-Agent header allowed"`) {
		t.Errorf("two User-Agents: %d %s", st, body)
	}
	st, _, body = rawRequest(t, addr, "GET /default HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if st != 200 {
		t.Errorf("no User-Agent: %d %s", st, body)
	}
}

func TestCORS(t *testing.T) {
	up := bodyEchoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: all
        paths: [/all]
        plugins: [{name: cors}]
      - name: listed
        paths: [/listed]
        plugins:
          - name: cors
            config:
              origins: ["http://a.test", "(.*)\\.b\\.test", "https://c.test:8443"]
              methods: [GET, POST]
              headers: [X-One, X-Two]
              exposed_headers: [X-Upstream]
              credentials: true
              max_age: 3600
              private_network: true
          - name: key-auth
      - name: single
        paths: [/single]
        plugins: [{name: cors, config: {origins: ["http://only.test"]}}]
      - name: credall
        paths: [/credall]
        plugins: [{name: cors, config: {credentials: true}}]
      - name: continue
        paths: [/continue]
        plugins: [{name: cors, config: {preflight_continue: true}}]
consumers:
  - username: alice
    keyauth_credentials: [{key: k}]
`, up), Options{})
	pre := func(path, origin string, extra map[string]string) resp {
		h := map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST"}
		for k, v := range extra {
			h[k] = v
		}
		return do(t, "OPTIONS", base+path, h)
	}
	check := func(what string, r resp, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q (status %d)", what, k, got, v, r.status)
			}
			if v == "" && len(r.header.Values(k)) > 0 {
				t.Errorf("%s: %s present", what, k)
			}
		}
	}
	r := pre("/all", "http://x.test", map[string]string{"Access-Control-Request-Headers": "X-Custom"})
	if r.status != 200 || r.body != "" {
		t.Errorf("preflight: %d %q", r.status, r.body)
	}
	check("preflight, defaults", r, map[string]string{
		"Access-Control-Allow-Origin":  "*",
		"Access-Control-Allow-Methods": "GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS,TRACE,CONNECT",
		"Access-Control-Allow-Headers": "X-Custom",
		"Vary":                         "", "Access-Control-Max-Age": "", "Access-Control-Allow-Credentials": "",
	})
	r = pre("/listed", "http://x.b.test", map[string]string{"Access-Control-Request-Private-Network": "true"})
	if r.status != 200 {
		t.Errorf("preflight before key-auth: %d %s", r.status, r.body)
	}
	check("preflight, regex origin", r, map[string]string{
		"Access-Control-Allow-Origin":          "http://x.b.test",
		"Vary":                                 "Origin",
		"Access-Control-Allow-Methods":         "GET,POST",
		"Access-Control-Allow-Headers":         "X-One,X-Two",
		"Access-Control-Allow-Credentials":     "true",
		"Access-Control-Max-Age":               "3600",
		"Access-Control-Allow-Private-Network": "true",
	})
	check("preflight, port normalized", pre("/listed", "https://c.test:8443", nil), map[string]string{"Access-Control-Allow-Origin": "https://c.test:8443"})
	check("preflight, default port dropped", pre("/listed", "http://a.test:80", nil), map[string]string{"Access-Control-Allow-Origin": "http://a.test"})
	check("preflight, origin not listed", pre("/listed", "http://evil.test", nil), map[string]string{"Access-Control-Allow-Origin": "", "Vary": "Origin"})
	check("preflight, regex is anchored", pre("/listed", "http://x.b.test.evil", nil), map[string]string{"Access-Control-Allow-Origin": ""})

	// Actual requests: headers in the response phase, on plugins' answers too.
	r = do(t, "GET", base+"/listed", map[string]string{"Origin": "http://a.test"})
	if r.status != 401 {
		t.Fatalf("no key: %d", r.status)
	}
	check("401 from key-auth", r, map[string]string{"Access-Control-Allow-Origin": "http://a.test", "Access-Control-Allow-Credentials": "true", "Access-Control-Expose-Headers": "X-Upstream"})
	r = do(t, "GET", base+"/listed", map[string]string{"Origin": "http://a.test", "apikey": "k"})
	if r.status != 200 {
		t.Fatalf("with key: %d", r.status)
	}
	check("proxied", r, map[string]string{"Access-Control-Allow-Origin": "http://a.test", "Access-Control-Expose-Headers": "X-Upstream", "Access-Control-Allow-Methods": ""})
	if got := r.header.Values("Vary"); strings.Join(got, ", ") != "Accept-Encoding, Origin" {
		t.Errorf("Vary %q: the upstream's and Origin", got)
	}
	check("single origin, sent as configured", do(t, "GET", base+"/single", map[string]string{"Origin": "http://other.test"}), map[string]string{"Access-Control-Allow-Origin": "http://only.test"})
	check("no origin, allow_origin_absent", do(t, "GET", base+"/all", nil), map[string]string{"Access-Control-Allow-Origin": "*"})
	r = do(t, "GET", base+"/credall", map[string]string{"Origin": "http://z.test"})
	check("credentials with *: the origin echoed", r, map[string]string{"Access-Control-Allow-Origin": "http://z.test", "Access-Control-Allow-Credentials": "true"})
	if got := r.header.Values("Vary"); strings.Join(got, ", ") != "Accept-Encoding, Origin" {
		t.Errorf("credentials with *: Vary %q", got)
	}
	r = pre("/continue", "http://x.test", nil)
	if r.status != 200 || r.header.Get("X-Upstream") != "echo" || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight_continue: %d %v", r.status, r.header)
	}
}

func TestCorrelationID(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: counter
        paths: [/counter]
        plugins: [{name: correlation-id, config: {echo_downstream: true}}]
      - name: uuid
        paths: [/uuid]
        plugins: [{name: correlation-id, config: {header_name: X-Trace, generator: uuid}}]
      - name: tracker
        paths: [/tracker]
        plugins: [{name: correlation-id, config: {generator: tracker, echo_downstream: true}}]
`, up), Options{})
	counter := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}#(\d+)$`)
	r1, r2 := do(t, "GET", base+"/counter", nil), do(t, "GET", base+"/counter", nil)
	id1, id2 := r1.echoed(t).Headers["kong-request-id"], r2.echoed(t).Headers["kong-request-id"]
	m1, m2 := counter.FindStringSubmatch(id1), counter.FindStringSubmatch(id2)
	if m1 == nil || m2 == nil || id1[:36] != id2[:36] || m1[1] == m2[1] {
		t.Errorf("uuid#counter ids %q, %q", id1, id2)
	}
	if got := r1.header.Get("Kong-Request-ID"); got != id1 {
		t.Errorf("echo_downstream: %q, want %q", got, id1)
	}
	r := do(t, "GET", base+"/counter", map[string]string{"Kong-Request-ID": "mine"})
	if r.echoed(t).Headers["kong-request-id"] != "mine" || r.header.Get("Kong-Request-ID") != "mine" {
		t.Errorf("a client's id is kept: %v %v", r.echoed(t).Headers, r.header)
	}
	r = do(t, "GET", base+"/uuid", nil)
	if id := r.echoed(t).Headers["x-trace"]; !regexp.MustCompile(`^[0-9a-f-]{36}$`).MatchString(id) || r.header.Get("X-Trace") != "" {
		t.Errorf("uuid: %q, response %v", id, r.header)
	}
	r = do(t, "GET", base+"/tracker", nil)
	if id := r.header.Get("Kong-Request-ID"); !regexp.MustCompile(`^127\.0\.0\.1-\d+-\d+-\d+-\d+-\d+\.\d{3}$`).MatchString(id) {
		t.Errorf("tracker: %q", id)
	}
}

func TestRequestSizeLimiting(t *testing.T) {
	up := bodyEchoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: small
        paths: [/small]
        plugins: [{name: request-size-limiting, config: {allowed_payload_size: 10, size_unit: bytes}}]
      - name: kb
        paths: [/kb]
        plugins: [{name: request-size-limiting, config: {allowed_payload_size: 1, size_unit: kilobytes, require_content_length: true}}]
`, up), Options{})
	addr := strings.TrimPrefix(base, "http://")
	if r := doBody(t, "POST", base+"/small", "0123456789", nil); r.status != 200 {
		t.Errorf("at the limit: %d %s", r.status, r.body)
	}
	wantKongError(t, "over the limit", doBody(t, "POST", base+"/small", "0123456789a", nil), 413, "Request size limit exceeded")
	st, _, body := rawRequest(t, addr, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n0123456789a")
	if st != 417 || !strings.Contains(body, `"message":"Request size limit exceeded"`) {
		t.Errorf("Expect: 100-continue over the limit: %d %s", st, body)
	}
	st, _, body = rawRequest(t, addr, "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n6\r\n6789ab\r\n0\r\n\r\n")
	if st != 413 || !strings.Contains(body, `"message":"Request size limit exceeded"`) {
		t.Errorf("chunked over the limit: %d %s", st, body)
	}
	st, _, body = rawRequest(t, addr, "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\n01234\r\n0\r\n\r\n")
	if st != 200 || !strings.Contains(body, `"body":"01234"`) {
		t.Errorf("chunked under the limit: %d %s", st, body)
	}
	if r := doBody(t, "POST", base+"/kb", strings.Repeat("x", 1024), nil); r.status != 200 {
		t.Errorf("1 KiB: %d", r.status)
	}
	wantKongError(t, "1 KiB + 1", doBody(t, "POST", base+"/kb", strings.Repeat("x", 1025), nil), 413, "Request size limit exceeded")
	st, _, body = rawRequest(t, addr, "GET /kb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if st != 411 || !strings.Contains(body, `"message":"A valid Content-Length header is required"`) {
		t.Errorf("require_content_length: %d %s", st, body)
	}
}

func TestRequestTransformer(t *testing.T) {
	up := bodyEchoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: t
        paths: [/t]
        plugins:
          - name: request-transformer
            config:
              remove: {headers: [x-drop], querystring: [qdrop], body: [bdrop]}
              rename: {headers: ["x-old:x-new"], querystring: ["qold:qnew"], body: ["bold:bnew"]}
              replace: {headers: ["x-rep:replaced", "host:upstream.test"], querystring: ["qrep:r"], body: ["brep:r"]}
              add: {headers: ["x-add:added", "x-keep:not-this"], querystring: ["qadd:a"], body: ["badd:a"]}
              append: {headers: ["x-app:two"], querystring: ["qapp:2"], body: ["bapp:2"]}
      - name: method
        paths: [/method]
        plugins:
          - name: request-transformer
            config: {http_method: GET, replace: {uri: /elsewhere}}
`, up), Options{})
	hdr := map[string]string{"X-Drop": "1", "X-Old": "o", "X-Rep": "orig", "X-Keep": "mine", "X-App": "one", "Content-Type": "application/json"}
	r := doBody(t, "POST", base+"/t/p?qdrop=1&qold=o&qrep=x&qapp=1&keep=k", `{"bdrop":1,"bold":"o","brep":"x","bapp":"1","keep":true}`, hdr)
	var e bodyEchoed
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h := e.Headers
	if _, ok := h["x-drop"]; ok || h["x-new"] != "o" || h["x-old"] != "" || h["x-rep"] != "replaced" || h["x-add"] != "added" ||
		h["x-keep"] != "mine" || h["x-app"] != "one,two" || e.Host != "upstream.test" {
		t.Errorf("headers %v, host %q", h, e.Host)
	}
	if e.Query != "keep=k&qadd=a&qapp=1&qapp=2&qnew=o&qrep=r" {
		t.Errorf("query %q", e.Query)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(e.Body), &body); err != nil {
		t.Fatalf("body %q: %v", e.Body, err)
	}
	want := `map[badd:a bapp:[1 2] bnew:o brep:r keep:true]`
	if fmt.Sprint(body) != want {
		t.Errorf("json body %v, want %s", body, want)
	}
	if e.Headers["content-length"] != fmt.Sprint(len(e.Body)) {
		t.Errorf("content-length %q for %d bytes", e.Headers["content-length"], len(e.Body))
	}
	r = doBody(t, "POST", base+"/t", "bdrop=1&bold=o&keep=k", map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatal(err)
	}
	if e.Body != "badd=a&bapp=2&bnew=o&keep=k" {
		t.Errorf("form body %q", e.Body)
	}
	r = doBody(t, "POST", base+"/method/x", "a=1&b=2", map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatal(err)
	}
	if e.Method != "GET" || e.Path != "/elsewhere" || e.Query != "a=1&b=2" {
		t.Errorf("http_method and replace.uri: %s %s ?%s", e.Method, e.Path, e.Query)
	}
}

func TestResponseTransformer(t *testing.T) {
	up := bodyEchoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: t
        paths: [/t]
        plugins:
          - name: response-transformer
            config:
              remove: {headers: [x-remove-me], json: [headers]}
              rename: {headers: ["x-upstream:x-was-upstream"], json: ["path:where"]}
              replace: {headers: ["content-type:application/json; charset=utf-8"], json: ["method:PUT"]}
              add: {headers: ["x-added:yes"], json: ["n:42", "ok:true", "s:text"], json_types: [number, boolean, string]}
              append: {headers: ["x-added:more"], json: ["query:more"]}
      - name: auth
        paths: [/auth]
        plugins:
          - name: key-auth
          - name: response-transformer
            config: {add: {json: ["hint:ask for a key"]}}
`, up), Options{})
	r := do(t, "GET", base+"/t/x?q=1", nil)
	if r.header.Get("X-Remove-Me") != "" || r.header.Get("X-Upstream") != "" || r.header.Get("X-Was-Upstream") != "echo" ||
		strings.Join(r.header.Values("X-Added"), ",") != "yes,more" || r.header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("headers %v", r.header)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("%d %q: %v", r.status, r.body, err)
	}
	if _, ok := body["headers"]; ok || body["where"] != "/x" || body["method"] != "PUT" || body["n"] != 42.0 || body["ok"] != true ||
		body["s"] != "text" || fmt.Sprint(body["query"]) != "[q=1 more]" {
		t.Errorf("body %v", body)
	}
	if r.header.Get("Content-Length") != fmt.Sprint(len(r.body)) {
		t.Errorf("Content-Length %q for %d bytes", r.header.Get("Content-Length"), len(r.body))
	}
	r = do(t, "GET", base+"/auth", nil)
	if r.status != 401 || !strings.Contains(r.body, `"hint":"ask for a key"`) || !strings.Contains(r.body, `"message":"No API key found in request"`) {
		t.Errorf("a plugin's answer is transformed too: %d %s", r.status, r.body)
	}
}

func TestPrometheusPlugin(t *testing.T) {
	up := echoUpstream(t)
	g, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: r
        paths: [/r]
      - name: locked
        paths: [/locked]
        plugins: [{name: key-auth}]
plugins:
  - name: prometheus
    config: {per_consumer: true, status_code_metrics: true, latency_metrics: true, bandwidth_metrics: true}
consumers:
  - username: alice
    keyauth_credentials: [{key: k}]
`, up), Options{})
	do(t, "GET", base+"/r", nil)
	do(t, "GET", base+"/locked", nil)
	do(t, "GET", base+"/locked", map[string]string{"apikey": "k"})
	km, err := g.Metrics().kong()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"api", "r", "200", "service", "default", ""}, 1},
		{[]string{"api", "locked", "401", "kong", "default", ""}, 1},
		{[]string{"api", "locked", "200", "service", "default", "alice"}, 1},
	} {
		if got := testutil.ToFloat64(km.requests.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("kong_http_requests_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(km.request, "kong_request_latency_ms"); n != 2 {
		t.Errorf("kong_request_latency_ms series: %d, want one per route", n)
	}
	if n := testutil.CollectAndCount(km.upstream, "kong_upstream_latency_ms"); n != 2 {
		t.Errorf("kong_upstream_latency_ms series: %d", n)
	}
	if v := testutil.ToFloat64(km.bandwidth.WithLabelValues("api", "r", "egress", "default", "")); v <= 0 {
		t.Errorf("kong_bandwidth_bytes egress %v", v)
	}
	names, err := g.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range names {
		found[mf.GetName()] = true
	}
	for _, n := range []string{"kong_http_requests_total", "kong_kong_latency_ms", "kong_upstream_latency_ms", "kong_request_latency_ms", "kong_bandwidth_bytes", "sluice_http_requests_total"} {
		if !found[n] {
			t.Errorf("%s not served", n)
		}
	}
}

// FuzzEverydayPluginConfig is FuzzPluginConfig for the everyday plugins:
// no panic, and every rejection names a field of the plugin in the
// user's words.
func FuzzEverydayPluginConfig(f *testing.F) {
	names := []string{"ip-restriction", "cors", "correlation-id", "request-size-limiting", "request-transformer", "response-transformer", "prometheus", "bot-detection"}
	for i := range names {
		f.Add(uint8(i), `{}`)
	}
	f.Add(uint8(0), `{"allow":["1.2.3.4/40"],"status":1.5,"message":3}`)
	f.Add(uint8(1), `{"origins":["(x","*"],"methods":["GET"],"max_age":-1}`)
	f.Add(uint8(2), `{"header_name":"","generator":null}`)
	f.Add(uint8(3), `{"allowed_payload_size":-3,"size_unit":"bytes"}`)
	f.Add(uint8(4), `{"add":{"headers":[":"]},"replace":{"uri":"$(x)"},"rename":{"body":["a::"]}}`)
	f.Add(uint8(5), `{"append":{"json":["a:b"],"json_types":["number","x"]},"remove":{"json":{}}}`)
	f.Add(uint8(6), `{"per_consumer":1}`)
	f.Add(uint8(7), `{"allow":["[a-"],"deny":[1]}`)
	g := validator(f)
	f.Fuzz(func(t *testing.T, which uint8, config string) {
		if !json.Valid([]byte(config)) {
			return
		}
		doc, _ := json.Marshal(map[string]any{
			"_format_version": "3.0",
			"plugins":         []any{map[string]any{"name": names[int(which)%len(names)], "config": json.RawMessage(config)}},
		})
		err := g.Validate(doc)
		if err == nil {
			return
		}
		fes, ok := field.Of(err)
		if !ok || len(fes) == 0 {
			t.Fatalf("error %v lists no field errors", err)
		}
		for _, fe := range fes {
			underPlugin := fe.Path == "plugins[0]" || strings.HasPrefix(fe.Path, "plugins[0].")
			if !underPlugin && fe.Path != "" || fe.Message == "" {
				t.Fatalf("error %q does not name a field of the plugin", fe)
			}
			if goWords.MatchString(fe.Message) {
				t.Fatalf("error %q speaks Go", fe)
			}
		}
	})
}

// TestCorrelationIDInAccessLog: the id is in the request's access line,
// as Kong serializes it for its log plugins.
func TestCorrelationIDInAccessLog(t *testing.T) {
	up := echoUpstream(t)
	var logs syncBuffer
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
plugins: [{name: correlation-id}]
`, up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), AccessLog: true})
	id := do(t, "GET", base+"/", nil).echoed(t).Headers["kong-request-id"]
	lines := accessLines(t, logs.String())
	if len(lines) != 1 || id == "" || lines[0]["correlation_id"] != id {
		t.Errorf("access lines %v, want correlation_id %q", lines, id)
	}
}
