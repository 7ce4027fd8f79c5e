package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Paths are routed and sent upstream as Kong does (kong/tools/uri.lua):
// matched in normalised form, where encoded reserved characters stay
// encoded, and escaped again for the upstream request line, so that an
// encoded "?" or "#" never becomes a real one and no raw byte reaches the
// upstream's request line.
func TestPathsAsKong(t *testing.T) {
	type seen struct{ uri, fwdPath string }
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.RequestURI, r.Header.Get("X-Forwarded-Path")}
		w.Header().Set("X-Route", r.Header.Get("X-Route"))
	}))
	t.Cleanup(up.Close)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM/v1
    routes:
      - name: files
        paths: [/files]
        plugins:
          - {name: request-transformer, config: {remove: {querystring: [admin]}, add: {headers: ["X-Route:files"]}}}
      - name: encoded
        paths: [/pkg/a%2Fb]
        plugins:
          - {name: request-transformer, config: {add: {headers: ["X-Route:encoded"]}}}
      - name: admin
        paths: [/files/admin]
        plugins:
          - {name: request-transformer, config: {add: {headers: ["X-Route:admin"]}}}
`, up)
	_, base := startGateway(t, cfg, Options{})
	for _, c := range []struct {
		target, route, upstream, fwdPath string
	}{
		{"/files/x?admin=1", "files", "/v1/x", "/files/x"},
		{"/files/x%3Fadmin=1", "files", "/v1/x%3Fadmin=1", "/files/x%3Fadmin=1"},
		{"/files/x%23y", "files", "/v1/x%23y", "/files/x%23y"},
		{"/files/a%20b", "files", "/v1/a%20b", "/files/a%20b"},
		{"/files/%C3%A9", "files", "/v1/%C3%A9", "/files/%C3%A9"},
		{"/files/%00", "files", "/v1/%00", "/files/%00"},
		{"/files/%0d%0a", "files", "/v1/%0D%0A", "/files/%0d%0a"},
		{"/files/%61", "files", "/v1/a", "/files/%61"},
		{"/files/%2561", "files", "/v1/%2561", "/files/%2561"},
		{"/files//x/./y/../z", "files", "/v1/x/z", "/files//x/./y/../z"},
		{"/pkg/a%2Fb", "encoded", "/v1", "/pkg/a%2Fb"},
		{"/pkg/a%2fb", "encoded", "/v1", "/pkg/a%2fb"},
		{"/files%2Fadmin", "files", "/v1/%2Fadmin", "/files%2Fadmin"},
		{"/files/admin", "admin", "/v1", "/files/admin"},
	} {
		status, hdr, _ := rawRequest(t, strings.TrimPrefix(base, "http://"), "GET "+c.target+" HTTP/1.1\r\nHost: paths.test\r\nConnection: close\r\n\r\n")
		if status != 200 {
			t.Errorf("%s: status %d", c.target, status)
			continue
		}
		s := <-got
		if r := hdr.Get("X-Route"); r != c.route {
			t.Errorf("%s: route %q, want %q", c.target, r, c.route)
		}
		if s.uri != c.upstream {
			t.Errorf("%s: upstream request target %q, want %q", c.target, s.uri, c.upstream)
		}
		if s.fwdPath != c.fwdPath {
			t.Errorf("%s: X-Forwarded-Path %q, want %q", c.target, s.fwdPath, c.fwdPath)
		}
	}
}

// Routes are matched on the Host header, as Kong's router reads it, also
// for an absolute-form request target; preserve_host sends it as the
// client wrote it.
func TestHostAsKong(t *testing.T) {
	hosts := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
	}))
	t.Cleanup(up.Close)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - {name: exact, hosts: [exact.test], preserve_host: true}
      - {name: other, hosts: [other.test], preserve_host: true}
`, up)
	_, base := startGateway(t, cfg, Options{})
	addr := strings.TrimPrefix(base, "http://")
	if status, _, body := rawRequest(t, addr, "GET /x HTTP/1.1\r\nHost: Exact.Test:1234\r\nConnection: close\r\n\r\n"); status != 200 {
		t.Fatalf("status %d %s", status, body)
	}
	if h := <-hosts; h != "Exact.Test:1234" {
		t.Errorf("preserved Host %q, want Exact.Test:1234", h)
	}
	if status, _, body := rawRequest(t, addr, "GET http://exact.test/x HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n"); status != 200 {
		t.Fatalf("absolute-form: status %d %s", status, body)
	}
	if h := <-hosts; h != "other.test" {
		t.Errorf("absolute-form: upstream Host %q, want other.test (the route of the Host header)", h)
	}
}
