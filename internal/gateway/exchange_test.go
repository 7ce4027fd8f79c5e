package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestExchangeReuseOnKeepAlive sends requests one after the other on one
// keep-alive connection, so that each is served by the Exchange (and its
// buffers) the previous one released: nothing of a request (consumer,
// rate-limit headers, Retry-After, plugin outcomes, path, request id) may
// reach the next one.
func TestExchangeReuseOnKeepAlive(t *testing.T) {
	up := echoUpstream(t)
	var logs syncBuffer
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: svc
    url: UPSTREAM
    routes:
      - name: plain
        paths: [/plain]
        strip_path: false
      - name: limited
        paths: [/limited]
        strip_path: false
        plugins:
          - name: key-auth
          - name: rate-limiting-advanced
            config: {limit: [1], window_size: [60], window_type: fixed, identifier: consumer, namespace: reuse}
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-key}]
`, up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), AccessLog: true})

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func(path, extra string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: gw\r\n"+extra+"\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.Close {
			t.Fatalf("%s: the gateway closed the connection", path)
		}
		return res, string(b)
	}

	r1, _ := send("/limited/one", "apikey: alice-key\r\n")
	r2, _ := send("/limited/two", "apikey: alice-key\r\n")
	r3, body3 := send("/plain/three?q=1", "")
	if r1.StatusCode != 200 || r1.Header.Get("X-RateLimit-Remaining-Minute") != "0" {
		t.Fatalf("first: %d %v", r1.StatusCode, r1.Header)
	}
	if r2.StatusCode != 429 || r2.Header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v", r2.StatusCode, r2.Header)
	}
	if r3.StatusCode != 200 {
		t.Fatalf("third: %d %s", r3.StatusCode, body3)
	}
	for k := range r3.Header {
		if lk := strings.ToLower(k); strings.Contains(lk, "ratelimit") || lk == "retry-after" {
			t.Errorf("third response has %s: %v from an earlier request", k, r3.Header[k])
		}
	}
	ids := map[string]bool{}
	for _, r := range []*http.Response{r1, r2, r3} {
		ids[r.Header.Get("X-Kong-Request-Id")] = true
	}
	if len(ids) != 3 || ids[""] {
		t.Errorf("request ids %v, want three distinct ones", ids)
	}
	var e echoed
	if err := json.Unmarshal([]byte(body3), &e); err != nil {
		t.Fatal(err)
	}
	if e.Path != "/plain/three" || e.Headers["x-forwarded-path"] != "/plain/three" || e.Headers["x-consumer-username"] != "" {
		t.Errorf("third request upstream: %+v", e)
	}

	lines := accessLines(t, logs.String())
	if len(lines) != 3 {
		t.Fatalf("%d access lines:\n%s", len(lines), logs.String())
	}
	if l := lines[1]; l["consumer"] != "alice" || l["plugin.rate-limiting-advanced"] != "denied" || l["path"] != "/limited/two" {
		t.Errorf("second access line: %v", l)
	}
	l := lines[2]
	if l["path"] != "/plain/three" || l["route"] != "plain" || l["status"] != float64(200) || l["request_id"] != r3.Header.Get("X-Kong-Request-Id") {
		t.Errorf("third access line: %v", l)
	}
	for k := range l {
		if k == "consumer" || strings.HasPrefix(k, "plugin.") {
			t.Errorf("third access line has %s=%v from an earlier request", k, l[k])
		}
	}
}
