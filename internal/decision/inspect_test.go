package decision

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/testservers"
)

const inspectConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`

func httpDo(t *testing.T, method, url string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return res.StatusCode
}

// inspectAndReset exhausts a descriptor through a and b, finds it in a's
// top list (top lists are per process), reads its counter on b, resets it
// on a and sees the next decision on b allowed.
func inspectAndReset(t *testing.T, a, b *Service) {
	ca, _ := serveGRPC(t, a)
	cb, _ := serveGRPC(t, b)
	runSteps(t, ca, []step{{"1", request("edge", desc("remote_address", "10.0.0.1")), OK, codes_(OK), nil, nil}})
	runSteps(t, cb, []step{{"2", request("edge", desc("remote_address", "10.0.0.1")), OK, codes_(OK), nil, nil}})
	runSteps(t, ca, []step{{"3", request("edge", desc("remote_address", "10.0.0.1")), OVER, codes_(OVER), nil, nil}})
	ha := httptest.NewServer(a.Handler())
	defer ha.Close()
	hb := httptest.NewServer(b.Handler())
	defer hb.Close()

	var top struct {
		Data []TopList `json:"data"`
	}
	if code := httpDo(t, "GET", ha.URL+"/rate-limiting/top?domain=edge&by=denied", &top); code != 200 ||
		len(top.Data) != 1 || len(top.Data[0].Entries) != 1 || top.Data[0].Entries[0].Identifier != "key=remote_address&value=10.0.0.1" ||
		top.Data[0].Entries[0].Denied != 1 || top.Data[0].Entries[0].Requests < 1 {
		t.Fatalf("top: %d %+v", code, top)
	}
	if code := httpDo(t, "GET", ha.URL+"/rate-limiting/top?domain=nope", &map[string]any{}); code != 404 {
		t.Fatalf("top of an unknown domain: %d, want 404", code)
	}
	url := "/rate-limiting/counters?domain=edge&" + top.Data[0].Entries[0].Identifier
	var c Counter
	if code := httpDo(t, "GET", hb.URL+url, &c); code != 200 || len(c.Windows) != 1 || c.Windows[0].Current != 2 ||
		c.Windows[0].Limit != 2 || c.Windows[0].Remaining != 0 || c.Windows[0].Window != 3600 {
		t.Fatalf("counter: %d %+v; want 2 of 2 in the hour", code, c)
	}
	if code := httpDo(t, "DELETE", ha.URL+url, nil); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if code := httpDo(t, "GET", hb.URL+url, &map[string]any{}); code != 404 {
		t.Fatalf("counter after reset: %d, want 404", code)
	}
	runSteps(t, cb, []step{{"after reset", request("edge", desc("remote_address", "10.0.0.1")), OK, codes_(OK), nil, nil}})
	if code := httpDo(t, "GET", ha.URL+"/rate-limiting/counters?domain=edge&key=nope&value=x", &map[string]any{}); code != 404 {
		t.Fatalf("a descriptor no rule counts: %d, want 404", code)
	}
	req, _ := http.NewRequest("DELETE", ha.URL+url, nil)
	req.Header.Set("Origin", "http://evil.example")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 403 {
		t.Fatalf("cross-origin DELETE: %v %v; want 403", res, err)
	}
}

func TestInspectResetMemory(t *testing.T) {
	s := newService(t, inspectConfig, newClock(t0).opts())
	inspectAndReset(t, s, s)
}

// Two decision services on one real redis-server: a reset through one is
// seen by the other.
func TestInspectResetRedisTwoNodes(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	clk := newClock(t0)
	cfg := `
store:
  type: redis
  redis: {host: ` + r.Host() + `, port: ` + itoa(r.Port()) + `, clock: service, timeout: 2s}
` + inspectConfig
	var svcs []*Service
	for range 2 {
		s, err := Open(mustParse(t, cfg), clk.opts())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		svcs = append(svcs, s)
	}
	inspectAndReset(t, svcs[0], svcs[1])
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// With AdminToken the counters calls need Kong-Admin-Token; deciding,
// /status and /healthcheck do not.
func TestInspectAdminToken(t *testing.T) {
	o := newClock(t0).opts()
	o.AdminToken = "s3cret"
	s := newService(t, inspectConfig, o)
	h := httptest.NewServer(s.Handler())
	defer h.Close()
	call := func(method, path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, h.URL+path, nil)
		if token != "" {
			req.Header.Set("Kong-Admin-Token", token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode == 401 {
			var body map[string]string
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil || body["error"] != "Invalid credentials. Token or User credentials required" {
				t.Errorf("%s %s: 401 body %v, %v", method, path, body, err)
			}
		}
		return res.StatusCode
	}
	counter := "/rate-limiting/counters?domain=edge&key=remote_address&value=10.0.0.1"
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", counter, "", 401},
		{"GET", counter, "wrong", 401},
		{"GET", counter, "s3cret", 404},
		{"DELETE", counter, "", 401},
		{"DELETE", counter, "s3cret", 404}, // past the guard; nothing held
		{"GET", "/rate-limiting/top", "", 401},
		{"GET", "/rate-limiting/top", "s3cret", 200},
		{"GET", "/healthcheck", "", 200},
		{"GET", "/status", "", 200},
	} {
		if got := call(c.method, c.path, c.token); got != c.want {
			t.Errorf("%s %s with token %q: %d, want %d", c.method, c.path, c.token, got, c.want)
		}
	}
}

// TestInspectAdminHosts: with AdminHosts set, the counters calls answer
// only those Host names (421 otherwise: DNS rebinding), while the decision
// endpoints answer any Host, since proxies send their own; a reset that
// matches no count says so (404).
func TestInspectAdminHosts(t *testing.T) {
	h := httptest.NewUnstartedServer(nil)
	h.Start()
	defer h.Close()
	o := newClock(t0).opts()
	o.AdminHosts = adminauth.LoopbackHosts(h.Listener.Addr().String())
	h.Config.Handler = newService(t, inspectConfig, o).Handler()
	call := func(method, path, host string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, h.URL+path, strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`))
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	local := h.Listener.Addr().String()
	counter := "/rate-limiting/counters?domain=edge&key=remote_address&value=10.0.0.1"
	for _, c := range []struct {
		method, path, host string
		want               int
	}{
		{"DELETE", counter, "rebind.evil.example:80", 421},
		{"GET", counter, "rebind.evil.example:80", 421},
		{"GET", "/rate-limiting/top", "rebind.evil.example:80", 421},
		{"POST", "/json", "rebind.evil.example:80", 200},
		{"GET", counter, local, 200},
		{"DELETE", counter, local, 204},
		{"DELETE", counter, local, 404},
		{"GET", counter, local, 404},
	} {
		code, out := call(c.method, c.path, c.host)
		if code != c.want {
			t.Errorf("%s %s with Host %s: %d %v, want %d", c.method, c.path, c.host, code, out, c.want)
		}
		if code == 404 && c.method == "DELETE" && !strings.Contains(fmt.Sprint(out["error"]), "nothing was reset") {
			t.Errorf("DELETE of nothing: %v; want it to say nothing was reset", out)
		}
	}
	if code, out := call("GET", "/rate-limiting/counters?domain=nope&key=k&value=v", local); code != 404 || !strings.Contains(fmt.Sprint(out["error"]), `"nope"`) {
		t.Errorf("an unknown domain: %d %v; want 404 naming it", code, out)
	}
}

// A token bucket's counter shows the tokens taken and left and when it is
// full again; a full bucket holds nothing.
func TestResetTokenBucket(t *testing.T) {
	cfg := "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket}\n"
	eachBackendYAML(t, cfg, newClock(t0).opts(), func(t *testing.T, b backend) {
		h := httptest.NewServer(b.s.Handler())
		defer h.Close()
		for range 3 {
			call(t, b.c, request("edge", desc("k", "v")))
		}
		url := h.URL + "/rate-limiting/counters?domain=edge&key=k&value=v"
		var c Counter
		if code := httpDo(t, "GET", url, &c); code != 200 || len(c.Windows) != 1 ||
			c.Windows[0].WindowType != "token_bucket" || c.Windows[0].Current != 2 || c.Windows[0].Remaining != 0 || c.Windows[0].Reset != 3600 {
			t.Fatalf("GET of an empty token bucket: %d %+v; want 2 tokens taken, none left, full in 3600 s", code, c)
		}
		if code := httpDo(t, "DELETE", url, nil); code != 204 {
			t.Fatalf("DELETE of a token bucket: %d, want 204", code)
		}
		if code := httpDo(t, "GET", url, &map[string]any{}); code != 404 {
			t.Fatalf("GET of a full token bucket: %d, want 404 (nothing held)", code)
		}
		if resp := call(t, b.c, request("edge", desc("k", "v"))); resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("after the reset: %v, want OK", resp.OverallCode)
		}
	})
}
