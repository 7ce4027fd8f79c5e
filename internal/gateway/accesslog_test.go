package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAccessLogFields: a proxied request's line has the user agent, the
// bytes in and out and the upstream latency; a 429's names the plugin, the
// limit and the window that denied it.
func TestAccessLogFields(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "hello upstream")
	}))
	defer up.Close()
	var logs syncBuffer
	_, base := startGateway(t, `
_format_version: "3.0"
services:
  - name: svc
    url: `+up.URL+`
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1, 100], window_size: [60, 3600], identifier: ip, namespace: accesslog}
`, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), AccessLog: true})
	req, err := http.NewRequest("POST", base+"/a", strings.NewReader("12345"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "access-test/1.0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if r := do(t, "GET", base+"/a", nil); r.status != 429 {
		t.Fatalf("second: %d", r.status)
	}
	lines := accessLines(t, logs.String())
	if len(lines) != 2 {
		t.Fatalf("%d access lines:\n%s", len(lines), logs.String())
	}
	l := lines[0]
	if l["user_agent"] != "access-test/1.0" || l["bytes_in"] != float64(5) || l["bytes_out"] != float64(len("hello upstream")) {
		t.Errorf("proxied line: %v", l)
	}
	if _, ok := l["upstream_latency_ms"].(float64); !ok {
		t.Errorf("proxied line has no upstream_latency_ms: %v", l)
	}
	if _, ok := l["denied_by"]; ok {
		t.Errorf("an allowed request names a denial: %v", l)
	}
	l = lines[1]
	if l["status"] != float64(429) || l["denied_by"] != "rate-limiting-advanced" || l["denied_limit"] != float64(1) || l["denied_window_s"] != float64(60) {
		t.Errorf("429 line: %v", l)
	}
	if _, ok := l["upstream_latency_ms"]; ok {
		t.Errorf("a 429 answered by sluice has an upstream latency: %v", l)
	}
}
