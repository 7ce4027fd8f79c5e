package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/internal/gateway/proxyproto"
)

// echoUpstream answers every request with a JSON description of what it
// received.
func echoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := map[string]string{}
		for k, v := range r.Header {
			hdr[strings.ToLower(k)] = strings.Join(v, ",")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "echo")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery, "host": r.Host, "headers": hdr,
		})
	}))
	t.Cleanup(s.Close)
	return s
}

type echoed struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   string            `json:"query"`
	Host    string            `json:"host"`
	Headers map[string]string `json:"headers"`
}

// startGateway serves config on 127.0.0.1:0 and returns the gateway and
// its base URL. "UPSTREAM" in config is replaced by upstream's URL.
func startGateway(t *testing.T, config string, opts Options) (*Gateway, string) {
	t.Helper()
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(config), "test"); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return g, "http://" + ln.Addr().String()
}

func withUpstream(config string, up *httptest.Server) string {
	return strings.ReplaceAll(config, "UPSTREAM", up.URL)
}

type resp struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url string, hdr map[string]string) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
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

func (r resp) echoed(t *testing.T) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("status %d, body %q: %v", r.status, r.body, err)
	}
	return e
}

func TestRouting(t *testing.T) {
	up := echoUpstream(t)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM/v1
    routes:
      - name: short
        paths: [/api]
      - name: long
        paths: [/api/users]
        strip_path: false
      - name: regex
        paths: ["~/items/(?P<id>\\d+)$"]
        strip_path: false
      - name: hosted
        hosts: [example.com, "*.wild.test"]
        paths: [/api]
      - name: posts
        methods: [POST]
        paths: [/api]
        preserve_host: true
  - name: nopath
    url: UPSTREAM
routes:
  - name: top
    service: nopath
    paths: [/top]
`, up)
	_, base := startGateway(t, cfg, Options{})

	cases := []struct {
		name, method, path, host string
		wantPath                 string
		wantHost                 string
	}{
		{"prefix stripped", "GET", "/api/x?q=1", "", "/v1/x", ""},
		{"prefix exact", "GET", "/api", "", "/v1", ""},
		{"longest prefix wins, not stripped", "GET", "/api/users/7", "", "/v1/api/users/7", ""},
		{"regex", "GET", "/items/42", "", "/v1/items/42", ""},
		{"host route more specific", "GET", "/api/h", "example.com", "/v1/h", ""},
		{"wildcard host", "GET", "/api/h", "a.wild.test:8000", "/v1/h", ""},
		{"method route more specific, preserve_host", "POST", "/api/p", "client.test", "/v1/p", "client.test"},
		{"top-level route", "GET", "/top/a/b", "", "/a/b", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{}
			if c.host != "" {
				hdr["Host"] = c.host
			}
			r := do(t, c.method, base+c.path, hdr)
			if r.status != 200 {
				t.Fatalf("status %d, body %s", r.status, r.body)
			}
			e := r.echoed(t)
			if e.Path != c.wantPath {
				t.Errorf("upstream path %q, want %q", e.Path, c.wantPath)
			}
			if c.wantHost != "" && e.Host != c.wantHost {
				t.Errorf("upstream host %q, want %q", e.Host, c.wantHost)
			}
			if c.wantHost == "" && !strings.HasPrefix(e.Host, "127.0.0.1:") {
				t.Errorf("upstream host %q, want the service's", e.Host)
			}
		})
	}
	if e := do(t, "GET", base+"/api/x?q=1", nil).echoed(t); e.Query != "q=1" {
		t.Errorf("query %q, want q=1", e.Query)
	}
	r := do(t, "GET", base+"/nothing", nil)
	if r.status != 404 || !strings.Contains(r.body, `"message":"no Route matched with those values"`) {
		t.Errorf("unmatched: %d %s", r.status, r.body)
	}
}

func TestForwardedHeaders(t *testing.T) {
	up := echoUpstream(t)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes: [{name: r, paths: [/p]}]
`, up)
	_, base := startGateway(t, cfg, Options{})
	e := do(t, "GET", base+"/p/x", map[string]string{
		"X-Forwarded-For": "6.6.6.6", "X-Real-IP": "6.6.6.6", "X-Forwarded-Proto": "https",
		"Connection": "keep-alive, X-Secret", "X-Secret": "s", "Proxy-Authorization": "p",
	}).echoed(t)
	if got := e.Headers["x-real-ip"]; got != "127.0.0.1" {
		t.Errorf("X-Real-IP %q: an untrusted peer chose its address", got)
	}
	if got := e.Headers["x-forwarded-for"]; got != "6.6.6.6, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	if got := e.Headers["x-forwarded-proto"]; got != "http" {
		t.Errorf("X-Forwarded-Proto %q, want http (peer untrusted)", got)
	}
	if got := e.Headers["x-forwarded-prefix"]; got != "/p" {
		t.Errorf("X-Forwarded-Prefix %q", got)
	}
	for _, h := range []string{"x-secret", "proxy-authorization"} {
		if _, ok := e.Headers[h]; ok {
			t.Errorf("hop-by-hop header %s was forwarded", h)
		}
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, base := startGateway(t, fmt.Sprintf(`
_format_version: "3.0"
services: [{name: s, url: "http://%s", routes: [{paths: [/]}]}]
`, addr), Options{})
	r := do(t, "GET", base+"/", nil)
	if r.status != 502 || !strings.Contains(r.body, "An invalid response was received from the upstream server") {
		t.Errorf("got %d %s", r.status, r.body)
	}
}

// TestClientIPTrustedProxy: with the loopback peer trusted, X-Real-IP
// chooses the client address the rate limiter counts; without trust, it
// does not.
func TestClientIPTrustedProxy(t *testing.T) {
	up := echoUpstream(t)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1], window_size: [60], window_type: fixed, identifier: ip, namespace: cip}
`, up)
	trusted, err := clientip.New(clientip.Options{TrustedIPs: []string{"127.0.0.0/8"}, RealIPHeader: clientip.XForwardedFor, Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	_, base := startGateway(t, cfg, Options{ClientIP: trusted})
	for _, ip := range []string{"198.51.100.1", "198.51.100.2"} {
		r := do(t, "GET", base+"/", map[string]string{"X-Forwarded-For": ip + ", 127.0.0.9"})
		if r.status != 200 {
			t.Fatalf("%s: %d", ip, r.status)
		}
		if e := r.echoed(t); e.Headers["x-real-ip"] != ip {
			t.Errorf("X-Real-IP %q, want %s", e.Headers["x-real-ip"], ip)
		}
	}
	if r := do(t, "GET", base+"/", map[string]string{"X-Forwarded-For": "198.51.100.1"}); r.status != 429 {
		t.Errorf("second request of 198.51.100.1: %d, want 429", r.status)
	}

	_, untrusting := startGateway(t, strings.ReplaceAll(cfg, "namespace: cip", "namespace: cip2"), Options{})
	if r := do(t, "GET", untrusting+"/", map[string]string{"X-Forwarded-For": "198.51.100.1"}); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	if r := do(t, "GET", untrusting+"/", map[string]string{"X-Forwarded-For": "198.51.100.2"}); r.status != 429 {
		t.Errorf("an untrusted client changed its counted address with X-Forwarded-For: %d", r.status)
	}
}

// TestProxyProtocol sends a PROXY v1 header from a trusted balancer and
// checks the announced address becomes the client address.
func TestProxyProtocol(t *testing.T) {
	up := echoUpstream(t)
	res, err := clientip.New(clientip.Options{TrustedIPs: []string{"127.0.0.1"}, RealIPHeader: clientip.ProxyProtocol})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{ClientIP: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up)), "test"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(&proxyproto.Listener{Listener: ln}) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-done
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "PROXY TCP4 198.51.100.77 10.0.0.1 5555 80\r\nGET /x HTTP/1.1\r\nHost: h\r\nX-Real-IP: 6.6.6.6\r\nConnection: close\r\n\r\n")
	hres, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(hres.Body)
	var e echoed
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%d %s", hres.StatusCode, b)
	}
	if e.Headers["x-real-ip"] != "198.51.100.77" {
		t.Errorf("X-Real-IP %q, want the PROXY source", e.Headers["x-real-ip"])
	}
}

// TestProtocolsAndDisabledService: an https-only route answers plain HTTP
// with Kong's 426 unless a trusted proxy forwarded HTTPS; an http-only
// route serves HTTPS, as in Kong; routes of a disabled service are not
// matched.
func TestProtocolsAndDisabledService(t *testing.T) {
	up := echoUpstream(t)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: secure
    url: UPSTREAM
    routes:
      - {name: s, paths: [/secure], protocols: [https], path_handling: v0, request_buffering: true, response_buffering: false}
      - {name: redir, paths: [/redir], protocols: [https], https_redirect_status_code: 301}
      - {name: plain, paths: [/plain], protocols: [http]}
  - name: off
    url: UPSTREAM
    enabled: false
    routes: [{name: o, paths: [/off]}]
`, up)
	_, base := startGateway(t, cfg, Options{})
	if r := do(t, "GET", base+"/secure", nil); r.status != 426 || !strings.Contains(r.body, "Please use HTTPS protocol") {
		t.Errorf("plain http to an https route: %d %s", r.status, r.body)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(base + "/redir/x?y=1")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); res.StatusCode != 301 || loc != "https://127.0.0.1/redir/x?y=1" {
		t.Errorf("redirect: %d %q", res.StatusCode, loc)
	}
	if r := do(t, "GET", base+"/secure", map[string]string{"X-Forwarded-Proto": "https"}); r.status != 426 {
		t.Errorf("untrusted X-Forwarded-Proto: %d", r.status)
	}
	if r := do(t, "GET", base+"/off", nil); r.status != 404 {
		t.Errorf("route of a disabled service: %d", r.status)
	}
	trusted, err := clientip.New(clientip.Options{TrustedIPs: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, behind := startGateway(t, cfg, Options{ClientIP: trusted})
	if r := do(t, "GET", behind+"/secure", map[string]string{"X-Forwarded-Proto": "https"}); r.status != 200 {
		t.Errorf("https forwarded by a trusted proxy: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", behind+"/plain", map[string]string{"X-Forwarded-Proto": "https"}); r.status != 200 {
		t.Errorf("https forwarded to an http-only route: %d %s", r.status, r.body)
	}
}
