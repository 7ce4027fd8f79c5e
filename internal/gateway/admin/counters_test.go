package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const limited = `
_format_version: "3.0"
consumers:
  - username: alice
    id: 0c3f3a6e-1111-4a5b-9c8d-000000000001
    keyauth_credentials: [{key: alice-secret-key}]
services:
  - name: s
    url: UPSTREAM/v1
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: key-auth
      - name: rate-limiting-advanced
        id: 5b1f4c1e-2222-4a5b-9c8d-000000000002
        instance_name: per-consumer
        config: {limit: [2], window_size: [60], identifier: consumer, strategy: local, namespace: rla}
`

// aliceCall sends GET url with alice's key-auth key and returns the status.
func aliceCall(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("apikey", "alice-secret-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func doJSON(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decoding: %v", method, url, err)
		}
	}
	return res.StatusCode
}

func TestCountersAPI(t *testing.T) {
	_, proxy, admin, _ := setup(t, limited)
	call := func() int { return aliceCall(t, proxy+"/x") }
	for i, want := range []int{200, 200, 429} {
		if got := call(); got != want {
			t.Fatalf("call %d: %d, want %d", i, got, want)
		}
	}
	const consumer = "0c3f3a6e-1111-4a5b-9c8d-000000000001"

	var list struct {
		Data []map[string]any `json:"data"`
	}
	if code := doJSON(t, "GET", admin+"/rate-limiting/plugins", nil, &list); code != 200 || len(list.Data) != 1 ||
		list.Data[0]["instance_name"] != "per-consumer" || list.Data[0]["namespace"] != "rla" || list.Data[0]["strategy"] != "local" {
		t.Fatalf("GET /rate-limiting/plugins: %d %v", code, list)
	}

	var top struct {
		Data []struct {
			Top []map[string]any `json:"top"`
		} `json:"data"`
	}
	if code := doJSON(t, "GET", admin+"/rate-limiting/top?plugin=per-consumer&by=denied&n=5", nil, &top); code != 200 ||
		len(top.Data) != 1 || len(top.Data[0].Top) != 1 || top.Data[0].Top[0]["identifier"] != consumer || top.Data[0].Top[0]["denied"] != 1.0 {
		t.Fatalf("GET /rate-limiting/top: %d %+v", code, top)
	}

	counter := func() map[string]any {
		var c map[string]any
		if code := doJSON(t, "GET", admin+"/rate-limiting/plugins/per-consumer/counters/"+consumer, nil, &c); code != 200 {
			t.Fatalf("GET counter: %d %v", code, c)
		}
		return c["windows"].([]any)[0].(map[string]any)
	}
	if w := counter(); w["current"] != 3.0 || w["limit"] != 2.0 || w["remaining"] != 0.0 {
		t.Fatalf("counter window = %v; want 3 of 2", w)
	}

	var ex map[string]any
	code := doJSON(t, "POST", admin+"/rate-limiting/explain", map[string]any{
		"method": "GET", "path": "/x", "headers": map[string][]string{"apikey": {"alice-secret-key"}}, "client_ip": "10.1.2.3",
	}, &ex)
	if code != 200 || ex["allowed"] != false || ex["status"] != 429.0 || ex["consumer"].(map[string]any)["name"] != "alice" {
		t.Fatalf("explain: %d %v", code, ex)
	}
	plugins := ex["plugins"].([]any)
	if len(plugins) != 2 || plugins[0].(map[string]any)["name"] != "key-auth" {
		t.Fatalf("explain plugins = %v; want key-auth then rate-limiting-advanced", plugins)
	}
	rl := plugins[1].(map[string]any)["rate_limit"].(map[string]any)
	if rl["counter_key"] != consumer || rl["allowed"] != false {
		t.Fatalf("explain rate limit = %v", rl)
	}
	if strings.Contains(toJSON(ex), "alice-secret-key") {
		t.Fatal("explain echoes the API key")
	}
	if w := counter(); w["current"] != 3.0 {
		t.Fatalf("explain counted: %v", w)
	}

	if code := doJSON(t, "DELETE", admin+"/rate-limiting/plugins/5b1f4c1e-2222-4a5b-9c8d-000000000002/counters/"+consumer, nil, nil); code != 204 {
		t.Fatalf("DELETE counter: %d", code)
	}
	var nf map[string]any
	if code := doJSON(t, "GET", admin+"/rate-limiting/plugins/per-consumer/counters/"+consumer, nil, &nf); code != 404 {
		t.Fatalf("GET counter after reset: %d %v; want 404", code, nf)
	}
	if got := call(); got != 200 {
		t.Fatalf("after reset: %d, want 200", got)
	}
	if code := doJSON(t, "GET", admin+"/rate-limiting/plugins/nope/counters/x", nil, &nf); code != 404 {
		t.Fatalf("unknown plugin: %d", code)
	}
	// A bad request to explain is a 400 naming the field, in the user's
	// words; a body past the bound is a 413.
	for _, c := range []struct {
		body, field, message string
	}{
		{`{"path":"/x","clientip":"1.2.3.4"}`, "clientip", "unknown field"},
		{`{"path":5}`, "path", "expected a string"},
		{`{"headers":{"a":"b"}}`, "headers", "expected a list of strings"},
		{`{"path":"/x","port":70000}`, "port", "between 1 and 65535"},
		{`{"path":"/x","method":"G T\r\nX: y"}`, "method", "not an HTTP method"},
		{`{"path":"/x"} {"path":"/y"}`, "", "data after the value"},
	} {
		res, err := http.Post(admin+"/rate-limiting/explain", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var ans map[string]any
		_ = json.NewDecoder(res.Body).Decode(&ans)
		res.Body.Close()
		msg, _ := ans["message"].(string)
		if f, _ := ans["field"].(string); res.StatusCode != 400 || f != c.field || !strings.Contains(msg, c.message) || strings.Contains(msg, "Go ") {
			t.Errorf("explain %s: %d %v; want 400 naming %s", c.body, res.StatusCode, ans, c.field)
		}
	}
	// A wrong method or an unknown path is answered in JSON, as Kong's Admin API does.
	for _, c := range []struct {
		method, path string
		code         int
		message      string
	}{
		{"PUT", "/rate-limiting/plugins", 405, "Method not allowed"},
		{"GET", "/rate-limiting/nope", 404, "Not found"},
	} {
		var ans map[string]any
		if code := doJSON(t, c.method, admin+c.path, nil, &ans); code != c.code || ans["message"] != c.message {
			t.Errorf("%s %s: %d %v, want %d %q", c.method, c.path, code, ans, c.code, c.message)
		}
	}
	big := `{"path":"/` + strings.Repeat("x", maxExplainBody) + `"}`
	for _, ct := range []string{"application/yaml", "text/plain"} {
		var out map[string]any
		if code := doJSONType(t, admin+"/rate-limiting/explain", ct, "path: /x", &out); code != 415 || !strings.Contains(fmt.Sprint(out["message"]), "application/json") {
			t.Errorf("explain of %s: %d %v; want 415 naming application/json", ct, code, out)
		}
	}
	if res, err := http.Post(admin+"/rate-limiting/explain", "application/x-www-form-urlencoded", strings.NewReader("path=/x")); err != nil || res.StatusCode != 415 {
		t.Errorf("explain of a form: %v %v; want 415", res.StatusCode, err)
	}
	if res, err := http.Post(admin+"/rate-limiting/explain", "application/json", strings.NewReader(big)); err != nil || res.StatusCode != 413 {
		t.Errorf("explain of a body past the bound: %v %v; want 413", res.StatusCode, err)
	} else {
		res.Body.Close()
	}

	_, metrics := get(t, admin+"/metrics")
	if !strings.Contains(metrics, `sluice_admin_actions_total{action="reset_counter",outcome="ok"} 1`) {
		t.Fatal("the reset is not counted in sluice_admin_actions_total")
	}
}

func doJSONType(t *testing.T, url, contentType, body string, out any) int {
	t.Helper()
	res, err := http.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: %d, not JSON: %v", url, res.StatusCode, err)
	}
	return res.StatusCode
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The counters API is behind the same guard as the rest of the admin
// API: the token, and no state change from another origin.
func TestCountersAPIGuarded(t *testing.T) {
	g, _, _, _ := setup(t, limited)
	adm := httptest.NewServer(Handler(g, Options{Token: "s3cret"}))
	defer adm.Close()
	for _, c := range []struct {
		method, path, token, origin string
		want                        int
	}{
		{"GET", "/rate-limiting/plugins", "", "", 401},
		{"GET", "/rate-limiting/top", "wrong", "", 401},
		{"GET", "/rate-limiting/plugins", "s3cret", "", 200},
		{"DELETE", "/rate-limiting/plugins/per-consumer/counters/x", "s3cret", "http://evil.example", 403},
		{"DELETE", "/rate-limiting/plugins/per-consumer/counters/x", "s3cret", "", 404}, // past the guard; nothing held
	} {
		req, _ := http.NewRequest(c.method, adm.URL+c.path, nil)
		if c.token != "" {
			req.Header.Set(TokenHeader, c.token)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s %s (token %q, origin %q): %d, want %d", c.method, c.path, c.token, c.origin, res.StatusCode, c.want)
		}
	}
}

// TestCountersOperatorPaths: what an operator types reaches the counter
// the plugin counts under. A path identifier is written as it is in the
// URL (".../counters//p/special", which http.ServeMux would redirect to a
// path without its leading slash); a consumer is found by its username or
// custom_id as well as its id; a reset that matches nothing says so (404)
// instead of answering 204.
func TestCountersOperatorPaths(t *testing.T) {
	_, proxy, admin, _ := setup(t, `
_format_version: "3.0"
consumers:
  - {username: alice, custom_id: crm-7, id: 0c3f3a6e-1111-4a5b-9c8d-000000000001, keyauth_credentials: [{key: alice-secret-key}]}
services:
  - name: s
    url: UPSTREAM/v1
    routes:
      - name: p
        paths: [/p]
        plugins:
          - name: rate-limiting-advanced
            instance_name: by-path
            config: {limit: [1], window_size: [60], identifier: path, path: /p/special, namespace: by-path}
      - name: c
        paths: [/c]
        plugins:
          - name: key-auth
          - name: rate-limiting-advanced
            instance_name: by-consumer
            config: {limit: [1], window_size: [60], identifier: consumer, namespace: by-consumer}
`)
	call := func(path string) int { return aliceCall(t, proxy+path) }
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, admin+path, nil)
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if res.StatusCode != http.StatusNoContent {
			if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
				t.Fatalf("%s %s: %d, not JSON: %v", method, path, res.StatusCode, err)
			}
		}
		return res.StatusCode, out
	}

	for _, c := range []struct{ plugin, identifier, request string }{
		{"by-path", "/p/special", "/p/special"},
		{"by-path", "%2Fp%2Fspecial", "/p/special"},
		{"by-consumer", "alice", "/c"},
		{"by-consumer", "crm-7", "/c"},
		{"by-consumer", "0c3f3a6e-1111-4a5b-9c8d-000000000001", "/c"},
	} {
		if a, b := call(c.request), call(c.request); a != 200 || b != 429 {
			t.Fatalf("%s: calls %d %d, want 200 429", c.request, a, b)
		}
		url := "/rate-limiting/plugins/" + c.plugin + "/counters/" + c.identifier
		if code, out := do("GET", url); code != 200 || out["counter_key"] == nil {
			t.Fatalf("GET %s: %d %v, want the counter", url, code, out)
		}
		if code, out := do("DELETE", url); code != 204 {
			t.Fatalf("DELETE %s: %d %v, want 204", url, code, out)
		}
		if got := call(c.request); got != 200 {
			t.Fatalf("%s after DELETE %s: %d, want 200 (reset)", c.request, url, got)
		}
		if code, out := do("DELETE", url); code != 204 {
			t.Fatalf("DELETE %s with a count of 1: %d %v, want 204", url, code, out)
		}
	}

	// Consumers are named by username beside their id, in counters and top lists.
	if a, b := call("/c"), call("/c"); a != 200 || b != 429 {
		t.Fatalf("/c: %d %d", a, b)
	}
	if code, out := do("GET", "/rate-limiting/plugins/by-consumer/counters/alice"); code != 200 ||
		fmt.Sprint(out["consumer"]) != "map[custom_id:crm-7 id:0c3f3a6e-1111-4a5b-9c8d-000000000001 username:alice]" {
		t.Errorf("counter of alice: %d %v; want the consumer named", code, out["consumer"])
	}
	if code, out := do("GET", "/rate-limiting/top?plugin=by-consumer"); code != 200 || !strings.Contains(fmt.Sprint(out["data"]), "username:alice") {
		t.Errorf("top of by-consumer: %d %v; want alice named", code, out)
	}

	if code, out := do("GET", "/rate-limiting/top?plugins=by-consumer"); code != 400 || out["field"] != "plugins" {
		t.Errorf("top with a misspelt parameter: %d %v; want 400 with field plugins", code, out)
	}

	code, out := do("DELETE", "/rate-limiting/plugins/by-consumer/counters/bob")
	if msg, _ := out["message"].(string); code != 404 || !strings.Contains(msg, "'bob'") || !strings.Contains(msg, "identifier: consumer") || !strings.Contains(msg, "nothing was reset") {
		t.Errorf("DELETE of a value nothing counts: %d %v; want 404 naming it, the identifier kind and that nothing was reset", code, out)
	}
	code, out = do("GET", "/rate-limiting/plugins/nope/counters/x")
	if msg, _ := out["message"].(string); code != 404 || !strings.Contains(msg, "'nope'") {
		t.Errorf("an unknown plugin: %d %v; want 404 naming it", code, out)
	}
	if code, _ := do("PUT", "/rate-limiting/plugins/by-path/counters//p/special"); code != 405 {
		t.Errorf("PUT on a counter: %d, want 405", code)
	}
}
