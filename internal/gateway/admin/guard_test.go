package admin

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/gateway"
)

const withSecrets = `
_format_version: "3.0"
services: [{name: s, url: http://127.0.0.1:9, routes: [{name: r, paths: [/]}]}]
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-secret-key}]
plugins:
  - name: rate-limiting-advanced
    config:
      limit: [5]
      window_size: [60]
      strategy: redis
      sync_rate: -1
      redis: {host: 127.0.0.1, port: 6379, password: redis-secret-pw}
`

// guarded starts the admin API with opts over a gateway serving cfg.
func guarded(t *testing.T, cfg string, opts Options) *httptest.Server {
	t.Helper()
	g, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(cfg), "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = Handler(g, opts)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return srv
}

func call(t *testing.T, method, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
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
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestAdminToken(t *testing.T) {
	srv := guarded(t, v1NoUpstream, Options{Token: "s3cret"})
	for _, tc := range []struct {
		hdr  map[string]string
		want int
	}{
		{nil, 401},
		{map[string]string{TokenHeader: "wrong"}, 401},
		{map[string]string{TokenHeader: "s3cret"}, 200},
	} {
		for _, p := range []string{"/", "/status", "/config", "/metrics"} {
			if code, body := call(t, "GET", srv.URL+p, tc.hdr, ""); code != tc.want {
				t.Errorf("GET %s with %v: %d %s, want %d", p, tc.hdr, code, body, tc.want)
			}
		}
	}
	if code, _ := call(t, "POST", srv.URL+"/config", map[string]string{"Content-Type": "application/yaml"}, v1NoUpstream); code != 401 {
		t.Errorf("POST /config without the token: %d", code)
	}
	if code, body := call(t, "POST", srv.URL+"/config", map[string]string{"Content-Type": "application/yaml", TokenHeader: "s3cret"}, v1NoUpstream); code != 201 {
		t.Errorf("POST /config with the token: %d %s", code, body)
	}
}

const v1NoUpstream = `
_format_version: "3.0"
services: [{name: s, url: http://127.0.0.1:9, routes: [{name: r, paths: [/]}]}]
`

// TestAdminOriginHostAndTypes: a page in a browser can send a form or
// text/plain POST to any address without a CORS preflight, and a rebinding
// DNS name can point at loopback; neither may change the configuration.
func TestAdminOriginHostAndTypes(t *testing.T) {
	g, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(v1NoUpstream), "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	srv.Config.Handler = Handler(g, Options{AllowedHosts: adminauth.LoopbackHosts(srv.Listener.Addr().String())})
	defer srv.Close()
	yamlCT := map[string]string{"Content-Type": "application/yaml"}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, 415},
		{"no content type", map[string]string{}, 415},
		{"foreign origin", map[string]string{"Content-Type": "application/yaml", "Origin": "http://evil.example"}, 403},
		{"null origin", map[string]string{"Content-Type": "application/yaml", "Origin": "null"}, 403},
		{"cross-site fetch", map[string]string{"Content-Type": "application/yaml", "Sec-Fetch-Site": "cross-site"}, 403},
		{"foreign form", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}, 403},
		{"rebinding host", map[string]string{"Content-Type": "application/yaml", "Host": "evil.example:" + port(srv.URL)}, 421},
		{"same origin", map[string]string{"Content-Type": "application/yaml", "Origin": srv.URL}, 201},
		{"curl", yamlCT, 201},
		{"localhost name", map[string]string{"Content-Type": "application/yaml", "Host": "localhost:" + port(srv.URL)}, 201},
	} {
		cfg := v1NoUpstream
		if tc.want != 201 {
			cfg = strings.ReplaceAll(cfg, "name: r", "name: refused")
		}
		if code, body := call(t, "POST", srv.URL+"/config", tc.hdr, cfg); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if code, _ := call(t, "GET", srv.URL+"/status", map[string]string{"Host": "evil.example"}, ""); code != 421 {
		t.Errorf("GET with a foreign Host: %d, want 421", code)
	}
	if data, _, _ := g.Config(); bytes.Contains(data, []byte("refused")) {
		t.Errorf("a refused call changed the configuration:\n%s", data)
	}
}

func port(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }

func TestConfigRedacted(t *testing.T) {
	srv := guarded(t, withSecrets, Options{})
	code, body := call(t, "GET", srv.URL+"/config", nil, "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, secret := range []string{"alice-secret-key", "redis-secret-pw"} {
		if strings.Contains(body, secret) {
			t.Errorf("GET /config shows %s:\n%s", secret, body)
		}
	}
	if !strings.Contains(body, Redacted) || !strings.Contains(body, "alice") {
		t.Errorf("GET /config:\n%s", body)
	}
	if code, _ := call(t, "GET", srv.URL+"/config?include_secrets=true", nil, ""); code != 403 {
		t.Errorf("include_secrets without a token: %d, want 403", code)
	}

	srv = guarded(t, withSecrets, Options{Token: "t"})
	tok := map[string]string{TokenHeader: "t"}
	if _, body := call(t, "GET", srv.URL+"/config", tok, ""); strings.Contains(body, "redis-secret-pw") {
		t.Errorf("redacted by default with a token too:\n%s", body)
	}
	if _, body := call(t, "GET", srv.URL+"/config?include_secrets=true", tok, ""); !strings.Contains(body, "redis-secret-pw") || !strings.Contains(body, "alice-secret-key") {
		t.Errorf("include_secrets with the token:\n%s", body)
	}
}

func TestRedactConfigFields(t *testing.T) {
	in := []byte(`{"consumers":[{"username":"u","keyauth_credentials":[{"key":"k1"}],"basicauth_credentials":[{"username":"u","password":"p1"}],"jwt_secrets":[{"key":"iss","secret":"s1"}]}],
"certificates":[{"cert":"PUBLIC","key":"PRIVATE"}],"routes":[{"headers":{"key":["visible"]}}],
"keyauth_credentials":[{"consumer":"u","key":"k2"}],"basicauth_credentials":[{"consumer":"u","username":"u2","password":"p2"}],"jwt_secrets":[{"consumer":"u","key":"iss2","secret":"sec2","rsa_public_key":"PEM"}],
"plugins":[{"name":"rate-limiting","config":{"policy":"redis","redis_host":"h","redis_password":"rp1"}}]}`)
	out, err := redactConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"k1", "p1", "s1", "PRIVATE", "k2", "p2", "sec2", "rp1"} {
		if bytes.Contains(out, []byte(secret)) {
			t.Errorf("%s not redacted:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"iss", "PUBLIC", "visible", "iss2", "u2", "PEM"} {
		if !bytes.Contains(out, []byte(kept)) {
			t.Errorf("%s redacted, but it is no secret:\n%s", kept, out)
		}
	}
}

// TestManagedConfigConflict: with the configuration owned by a watched
// file or etcd, POST /config answers 409 naming the source and changes
// nothing.
func TestManagedConfigConflict(t *testing.T) {
	srv := guarded(t, v1NoUpstream, Options{ManagedBy: "the watched file /etc/kong.yml"})
	code, body := call(t, "POST", srv.URL+"/config", map[string]string{"Content-Type": "application/yaml"}, strings.ReplaceAll(v1NoUpstream, "name: r", "name: other"))
	if code != 409 || !strings.Contains(body, "the watched file /etc/kong.yml") {
		t.Errorf("%d %s, want 409 naming the file", code, body)
	}
	if _, body := call(t, "GET", srv.URL+"/config", nil, ""); strings.Contains(body, "other") {
		t.Errorf("the configuration changed:\n%s", body)
	}
}

// TestEmptyConfigRejected: an empty or malformed body gets Kong's error
// shape and counts as a rejected reload.
func TestEmptyConfigRejected(t *testing.T) {
	srv := guarded(t, v1NoUpstream, Options{})
	for _, body := range []string{"", "{"} {
		code, out := call(t, "POST", srv.URL+"/config", map[string]string{"Content-Type": "application/yaml"}, body)
		if code != 400 || !strings.Contains(out, `"name":"invalid declarative configuration"`) {
			t.Errorf("%q: %d %s", body, code, out)
		}
	}
	_, metrics := call(t, "GET", srv.URL+"/metrics", nil, "")
	if !strings.Contains(metrics, `sluice_config_reloads_total{result="rejected",source="admin"} 2`) {
		t.Errorf("rejected reloads not counted:\n%s", grepLines(metrics, "reloads"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
