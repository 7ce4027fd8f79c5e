package decision

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// checkConfig is examples/nginx/decision.yaml, the file the nginx snippet
// in the docs is run with.
func checkConfig(t *testing.T, denyStatus string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/nginx/decision.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(b), "deny_status: 403", "deny_status: "+denyStatus, 1)
}

func doGet(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// nginxSnippet runs the documented snippet (examples/nginx/auth_request.conf)
// in a real nginx, asking the decision service at decideURL, in front of
// a backend that answers "backend <path>".
func nginxSnippet(t *testing.T, decideURL string) *testservers.NginxServer {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "backend "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	snippet, err := os.ReadFile("../../examples/nginx/auth_request.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("127.0.0.1:8080", strings.TrimPrefix(decideURL, "http://"),
		"127.0.0.1:9000", strings.TrimPrefix(backend.URL, "http://")).Replace(string(snippet))
	return testservers.Nginx(t, "", conf)
}

// TestNginxAuthRequest runs the documented snippet
// (examples/nginx/auth_request.conf) in a real nginx in front of a real
// upstream: the client sees 200s, then 429 with Retry-After and the
// rate-limit headers, never a 500.
func TestNginxAuthRequest(t *testing.T) {
	svc := newService(t, checkConfig(t, "403"), newClock(t0).opts())
	decide := httptest.NewServer(svc.Handler())
	defer decide.Close()
	ngx := nginxSnippet(t, decide.URL)

	// /login allows 2 a minute; every path 5 a minute per client address.
	for i := 1; i <= 2; i++ {
		res, body := doGet(t, ngx.URL()+"/login", nil)
		if res.StatusCode != 200 || body != "backend /login" {
			t.Fatalf("login %d: %d %q\n%s", i, res.StatusCode, body, ngx.ErrorLog())
		}
		if res.Header.Get("X-RateLimit-Limit") != "2" || res.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("login %d: headers %v", i, res.Header)
		}
	}
	res, body := doGet(t, ngx.URL()+"/login", nil)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || res.Header.Get("X-RateLimit-Remaining") != "0" || !strings.Contains(body, "API rate limit exceeded") {
		t.Fatalf("login 3: %d %v %q\n%s", res.StatusCode, res.Header, body, ngx.ErrorLog())
	}
	// The client address' limit: 5 in all, 3 of them spent above.
	for i := 4; i <= 5; i++ {
		if res, _ := doGet(t, ngx.URL()+"/other", nil); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	res, _ = doGet(t, ngx.URL()+"/other", nil)
	if res.StatusCode != 429 || res.Header.Get("X-RateLimit-Limit") != "5" {
		t.Fatalf("request 6: %d %v", res.StatusCode, res.Header)
	}
	if log := ngx.ErrorLog(); strings.Contains(log, "auth request unexpected status") {
		t.Errorf("nginx met an unexpected auth status:\n%s", log)
	}
}

// TestNginxAuthRequestFailOpen: with the documented snippet, a decision
// service that has no configuration (503), hangs past the snippet's
// timeouts, or is down lets the request through unchecked, never a 500 for
// the client. Any other error stays closed: a client cannot switch the
// check off with a request sluice refuses to read.
func TestNginxAuthRequestFailOpen(t *testing.T) {
	svc := newService(t, checkConfig(t, "403"), newClock(t0).opts())
	var mode atomic.Value
	mode.Store("serve")
	stop := make(chan struct{})
	decide := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "error":
			http.Error(w, "no rate limit configuration loaded", http.StatusServiceUnavailable)
		case "bad":
			http.Error(w, "bad request", http.StatusBadRequest)
		case "hang":
			select { // until nginx gives up (proxy_read_timeout) or the test ends
			case <-r.Context().Done():
			case <-stop:
			}
		default:
			svc.Handler().ServeHTTP(w, r)
		}
	}))
	defer decide.Close()
	defer close(stop)
	ngx := nginxSnippet(t, decide.URL)
	get := func(what string) {
		t.Helper()
		res, body := doGet(t, ngx.URL()+"/x", nil)
		if res.StatusCode != 200 || body != "backend /x" {
			t.Fatalf("%s: %d %q, want the backend's 200\n%s", what, res.StatusCode, body, ngx.ErrorLog())
		}
	}
	get("decided")
	mode.Store("bad")
	if res, body := doGet(t, ngx.URL()+"/x", nil); res.StatusCode != 500 || strings.Contains(body, "backend") {
		t.Fatalf("a 400 from the check: %d %q, want nginx's 500, the backend not reached", res.StatusCode, body)
	}
	mode.Store("serve")
	// A header value nginx passes on and Go's server refuses (400 before
	// any handler): the check fails closed.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ngx.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(raw), "HTTP/1.1 500") || strings.Contains(string(raw), "backend") {
		t.Fatalf("a control byte in a header: %q, want nginx's 500", raw)
	}
	mode.Store("error")
	get("no configuration loaded")
	mode.Store("hang")
	get("a hung service")
	mode.Store("serve")
	decide.Close()
	get("the service down")
}

// TestCheckForwardAuth: Traefik's forwardAuth sends the original request
// in X-Forwarded-*; with deny_status 429 the answer is passed to the client
// as is. Headers from a peer that is not trusted are ignored.
func TestCheckForwardAuth(t *testing.T) {
	cfg := strings.Replace(checkConfig(t, "429"), "trusted_proxies: [127.0.0.1, \"::1\"]", "trusted_proxies: [127.0.0.1]", 1)
	cfg = strings.Replace(cfg, "proxy: nginx", "proxy: traefik", 1)
	svc := newService(t, cfg, newClock(t0).opts())
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	fwd := func(ip, uri string) map[string]string {
		return map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": uri, "X-Forwarded-Host": "api.example", "X-Forwarded-For": "198.51.100.7, " + ip}
	}
	for i := 0; i < 2; i++ {
		if res, _ := doGet(t, srv.URL+"/check", fwd("203.0.113.9", "/login?next=/")); res.StatusCode != 200 {
			t.Fatalf("check %d: %d", i, res.StatusCode)
		}
	}
	res, body := doGet(t, srv.URL+"/check", fwd("203.0.113.9", "/login"))
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || res.Header.Get("RateLimit-Remaining") != "0" || !strings.Contains(body, "rate limit exceeded") {
		t.Fatalf("3rd /login: %d %v %s", res.StatusCode, res.Header, body)
	}
	// Another client address, another path: its own counters.
	if res, _ := doGet(t, srv.URL+"/check", fwd("203.0.113.10", "/x")); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("another client: %d %v", res.StatusCode, res.Header)
	}
}

func TestCheckUntrustedPeer(t *testing.T) {
	cfg := strings.Replace(checkConfig(t, "403"), "trusted_proxies: [127.0.0.1, \"::1\"]", "trusted_proxies: [192.0.2.1]", 1)
	svc := newService(t, cfg, newClock(t0).opts())
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	// The forwarded URI is not believed: the checked path is /check itself,
	// and every call counts against the peer's own address.
	hdr := map[string]string{"X-Original-URI": "/login", "X-Real-IP": "203.0.113.50"}
	for i := 1; i <= 5; i++ {
		if res, _ := doGet(t, srv.URL+"/check", hdr); res.StatusCode != 200 {
			t.Fatalf("check %d: %d", i, res.StatusCode)
		}
	}
	if res, _ := doGet(t, srv.URL+"/check", hdr); res.StatusCode != 403 {
		t.Fatalf("6th check: %d, want 403 on the peer's own address", res.StatusCode)
	}
}

func TestCheckConfigErrors(t *testing.T) {
	base := "domain: edge\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n"
	for _, tc := range []struct{ check, want string }{
		{"check: {domain: other, descriptors: [[{key: k, from: client_ip}]]}", `check.domain: unknown domain "other"`},
		{"check: {domain: edge}", "check.descriptors: required"},
		{"check: {domain: edge, deny_status: 500, descriptors: [[{key: k, from: path}]]}", "check.deny_status: expected a 4xx status, got 500"},
		{"check: {domain: edge, descriptors: [[{key: k, from: cookie}]]}", `check.descriptors[0][0].from: unknown source "cookie"`},
		{"check: {domain: edge, descriptors: [[{key: k}]]}", "check.descriptors[0][0]: give value or from"},
		{"check: {domain: edge, trusted_proxies: [nope], descriptors: [[{key: k, value: v}]]}", `check.trusted_proxies[0]: expected an address or CIDR, got "nope"`},
		{"check: {domain: edge, colour: red, descriptors: [[{key: k, value: v}]]}", "check.colour: unknown field"},
		{"check: {domain: edge, descriptors: [[{key: k, value: v}]]}", "check.proxy: required: nginx or traefik"},
		{"check: {domain: edge, proxy: envoy, descriptors: [[{key: k, value: v}]]}", `check.proxy: expected nginx or traefik, got "envoy"`},
	} {
		_, err := Parse([]byte(base + tc.check))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.check, err, tc.want)
		}
	}
}

// TestCheckProxyHeaders: each proxy passes the other's headers on from the
// client unchanged, so a check reads only the named proxy's: behind
// Traefik a client's X-Original-URI or X-Real-IP does not move its request
// to another counter, nor behind nginx a client's X-Forwarded-Uri.
func TestCheckProxyHeaders(t *testing.T) {
	for _, tc := range []struct {
		proxy string
		hdr   func(i int) map[string]string
	}{
		{"traefik", func(i int) map[string]string {
			return map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "203.0.113.1",
				"X-Original-URI": "/not-login-" + strconv.Itoa(i), "X-Real-IP": "198.51.100." + strconv.Itoa(i)}
		}},
		{"nginx", func(i int) map[string]string {
			return map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/login", "X-Real-IP": "203.0.113.1",
				"X-Forwarded-Uri": "/not-login-" + strconv.Itoa(i), "X-Forwarded-Method": "POST"}
		}},
	} {
		t.Run(tc.proxy, func(t *testing.T) {
			cfg := strings.Replace(checkConfig(t, "403"), "proxy: nginx", "proxy: "+tc.proxy, 1)
			svc := newService(t, cfg, newClock(t0).opts())
			srv := httptest.NewServer(svc.Handler())
			defer srv.Close()
			for i := 1; i <= 3; i++ {
				res, _ := doGet(t, srv.URL+"/check", tc.hdr(i))
				if want := []int{0, 200, 200, 403}[i]; res.StatusCode != want {
					t.Fatalf("check %d: %d, want %d (the /login limit of 2)", i, res.StatusCode, want)
				}
			}
		})
	}
}

// TestCheckPathNormalized: a path spelled another way (an encoded
// character, a doubled slash, a dot segment, a fragment) is the path nginx
// routes, and is counted as that path.
func TestCheckPathNormalized(t *testing.T) {
	for in, want := range map[string]string{
		"/login": "/login", "/%6Cogin": "/login", "//login": "/login", "/a/../login": "/login", "/./login": "/login",
		"/login/": "/login/", "/": "/", "": "/", "/a%2fb": "/a/b", "/%7Euser": "/~user", "/a//b/": "/a/b/", "/..": "/",
		"/a/%2E%2E/login": "/login", "/a%zz": "/a%zz", "/%2Flogin": "/login", "/a%2F..%2Flogin": "/login",
		"/login%2F": "/login/", "/login#x": "/login", "/a%20b": "/a b", "/a%3Fb": "/a?b",
	} {
		if got := normalizePath(in); got != want {
			t.Errorf("normalizePath(%q) = %q, want %q", in, got, want)
		}
	}
	svc := newService(t, checkConfig(t, "403"), newClock(t0).opts())
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	for i, uri := range []string{"/login", "/%6Cogin", "/%2Flogin#x?x=1"} {
		res, _ := doGet(t, srv.URL+"/check", map[string]string{"X-Original-URI": uri, "X-Real-IP": "203.0.113." + strconv.Itoa(i)})
		if want := []int{200, 200, 403}[i]; res.StatusCode != want {
			t.Fatalf("check of %s: %d, want %d (the /login limit of 2)", uri, res.StatusCode, want)
		}
	}
}
