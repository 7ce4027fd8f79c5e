package decision

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
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

// TestNginxAuthRequest runs the documented snippet
// (examples/nginx/auth_request.conf) in a real nginx in front of a real
// upstream: the client sees 200s, then 429 with Retry-After and the
// rate-limit headers, never a 500.
func TestNginxAuthRequest(t *testing.T) {
	svc := newService(t, checkConfig(t, "403"), newClock(t0).opts())
	decide := httptest.NewServer(svc.Handler())
	defer decide.Close()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "backend "+r.URL.Path)
	}))
	defer backend.Close()
	snippet, err := os.ReadFile("../../examples/nginx/auth_request.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("127.0.0.1:8080", strings.TrimPrefix(decide.URL, "http://"),
		"127.0.0.1:9000", strings.TrimPrefix(backend.URL, "http://")).Replace(string(snippet))
	ngx := testservers.Nginx(t, "", conf)

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

// TestCheckForwardAuth: Traefik's forwardAuth sends the original request
// in X-Forwarded-*; with deny_status 429 the answer is passed to the client
// as is. Headers from a peer that is not trusted are ignored.
func TestCheckForwardAuth(t *testing.T) {
	cfg := strings.Replace(checkConfig(t, "429"), "trusted_proxies: [127.0.0.1, \"::1\"]", "trusted_proxies: [127.0.0.1]", 1)
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
	} {
		_, err := Parse([]byte(base + tc.check))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.check, err, tc.want)
		}
	}
}
