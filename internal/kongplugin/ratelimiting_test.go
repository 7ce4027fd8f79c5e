package kongplugin

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Kong/go-pdk/entities"
	pdktest "github.com/Kong/go-pdk/test"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
)

// A worked example (limits 3/5 s and 5/10 s, fixed windows),
// through the PDK: headers in one SetHeaders call on allowed requests, one
// Exit with status, body and headers on rejected ones, and two PDK round
// trips per request for a consumer-identified, authenticated request.
func TestRateLimitingThroughFakeKong(t *testing.T) {
	p, clk := newTestProcess(t, Options{})
	clk.Advance(time.Second) // inside a 5 s and a 10 s window
	cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{
		"limit": [5, 3], "window_size": [10, 5], "window_type": "fixed", "namespace": "spec",
		"identifier": null, "redis": null, "throttling": null, "sync_rate": null,
		"route_id": null, "__plugin_id": "p-1", "__seq__": 7}`)
	req := kongtest.Request{Consumer: consumer("c1")}
	for i := 1; i <= 3; i++ {
		k := kongtest.New(t, req)
		calls := k.Run(cfg.Access)
		if want := []string{"kong.client.get_consumer", "kong.response.set_headers"}; !slices.Equal(calls, want) {
			t.Fatalf("request %d: PDK calls = %q, want %q", i, calls, want)
		}
		if k.Exit() != nil {
			t.Fatalf("request %d rejected", i)
		}
		h := k.ResponseHeaders()
		if got, want := h.Get("X-RateLimit-Remaining-5"), []string{"2", "1", "0"}[i-1]; got != want {
			t.Errorf("request %d: X-RateLimit-Remaining-5 = %q, want %q (headers %v)", i, got, want, h)
		}
	}
	k := kongtest.New(t, req)
	calls := k.Run(cfg.Access)
	if want := []string{"kong.client.get_consumer", "kong.response.exit"}; !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	e := k.Exit()
	if e == nil || e.Status != 429 || string(e.Body) != `{"message":"API rate limit exceeded"}` {
		t.Fatalf("exit = %+v", e)
	}
	for name, want := range map[string]string{
		"X-RateLimit-Remaining-10": "2", "RateLimit-Limit": "3", "RateLimit-Remaining": "0",
		"Content-Type": "application/json; charset=utf-8",
	} {
		if got := e.Headers.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if e.Headers.Get("Retry-After") == "" {
		t.Errorf("no Retry-After on a rejection: %v", e.Headers)
	}
	// Another consumer has its own counter; a new instance of the same
	// config (Kong restarts them) keeps the counters.
	cfg2 := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [5, 3], "window_size": [10, 5], "window_type": "fixed", "namespace": "spec", "__seq__": 8}`)
	if k := kongtest.New(t, kongtest.Request{Consumer: consumer("c2")}); k.Run(cfg2.Access) != nil && k.Exit() != nil {
		t.Fatal("c2 rejected")
	}
	if k := kongtest.New(t, req); k.Run(cfg2.Access) != nil && k.Exit() == nil {
		t.Fatal("c1 allowed after an instance restart: counters were reset")
	}
	// After the 5 s window, c1 passes again.
	clk.Advance(5 * time.Second)
	if k := kongtest.New(t, req); k.Run(cfg2.Access) != nil && k.Exit() != nil {
		t.Fatalf("c1 still rejected in the next window: %+v", k.Exit())
	}
}

// PDK round trips per request, per identifier: the figures of
// docs/kong-plugins.md.
func TestRateLimitingRoundTrips(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cases := []struct {
		name, config string
		req          kongtest.Request
		want         []string
	}{
		{"ip", `{"limit": [100], "window_size": [60], "identifier": "ip"}`, kongtest.Request{},
			[]string{"kong.client.get_forwarded_ip", "kong.response.set_headers"}},
		{"consumer authenticated", `{"limit": [100], "window_size": [60]}`, kongtest.Request{Consumer: consumer("c")},
			[]string{"kong.client.get_consumer", "kong.response.set_headers"}},
		{"consumer anonymous", `{"limit": [100], "window_size": [60]}`, kongtest.Request{},
			[]string{"kong.client.get_consumer", "kong.client.get_credential", "kong.client.get_forwarded_ip", "kong.response.set_headers"}},
		{"header present", `{"limit": [100], "window_size": [60], "identifier": "header", "header_name": "X-Key"}`,
			kongtest.Request{Headers: http.Header{"X-Key": {"k"}}},
			[]string{"kong.request.get_header", "kong.response.set_headers"}},
		{"service", `{"limit": [100], "window_size": [60], "identifier": "service"}`,
			kongtest.Request{Service: &entities.Service{Id: "s1"}},
			[]string{"kong.router.get_service", "kong.response.set_headers"}},
		{"compound", `{"limit": [100], "window_size": [60], "compound_identifier": ["route", "consumer"]}`,
			kongtest.Request{Route: &entities.Route{Id: "r1"}, Consumer: consumer("c")},
			[]string{"kong.router.get_route", "kong.client.get_consumer", "kong.response.set_headers"}},
		{"shared key present", `{"limit": [100], "window_size": [60], "shared_key": "sluice"}`,
			kongtest.Request{Shared: map[string]any{"sluice": map[string]any{"key": "k1"}}},
			[]string{"kong.ctx.shared.get", "kong.response.set_headers"}},
		{"shared key absent, consumer", `{"limit": [100], "window_size": [60], "shared_key": "sluice"}`,
			kongtest.Request{Consumer: consumer("c")},
			[]string{"kong.ctx.shared.get", "kong.client.get_consumer", "kong.response.set_headers"}},
		{"hidden headers", `{"limit": [100], "window_size": [60], "identifier": "ip", "hide_client_headers": true}`,
			kongtest.Request{}, []string{"kong.client.get_forwarded_ip"}},
		{"groups from tags", `{"limit": [100], "window_size": [60], "enforce_consumer_groups": true, "consumer_groups": ["gold"]}`,
			kongtest.Request{Consumer: consumer("c", "group:gold")},
			[]string{"kong.client.get_consumer", "kong.response.set_headers"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, tc.config)
			k := kongtest.New(t, tc.req)
			if calls := k.Run(cfg.Access); !slices.Equal(calls, tc.want) {
				t.Errorf("PDK calls = %q, want %q", calls, tc.want)
			}
			if k.Exit() != nil {
				t.Errorf("rejected: %+v", k.Exit())
			}
		})
	}
}

// The business plugin's key and quota reach the rate limiter through
// kong.ctx.shared; without them the limiter falls back to its identifier.
func TestRateLimitingWithDimensions(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	dims := instance[*DimensionsConfig](t, p.NewDimensions, `{
		"dimensions": [{"name": "tenant", "type": "header", "header": "X-Tenant"}],
		"overrides": [{"dimension": "tenant", "value": "small", "limit": [1], "window_size": [60]}]}`)
	rl := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [2], "window_size": [60], "window_type": "fixed", "identifier": "ip", "shared_key": "sluice", "namespace": "biz"}`)
	send := func(tenant, ip string) *kongtest.Kong {
		req := kongtest.Request{ForwardedIP: ip}
		if tenant != "" {
			req.Headers = http.Header{"X-Tenant": {tenant}}
		}
		k := kongtest.New(t, req)
		k.Run(dims.Access)
		k.Run(rl.Access)
		return k
	}
	// Tenant "big" has the plugin's limit of 2, across client IPs.
	for i, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		if k := send("big", ip); k.Exit() != nil {
			t.Fatalf("big request %d rejected", i)
		}
	}
	if k := send("big", "10.0.0.3"); k.Exit() == nil {
		t.Fatal("big allowed a third request")
	}
	// Tenant "small" has an override of 1.
	if k := send("small", "10.0.0.1"); k.Exit() != nil || k.ResponseHeaders().Get("X-RateLimit-Limit-Minute") != "1" {
		t.Fatalf("small: exit %+v headers %v", k.Exit(), k.ResponseHeaders())
	}
	if k := send("small", "10.0.0.1"); k.Exit() == nil {
		t.Fatal("small allowed a second request")
	}
	// No tenant: the identifier (IP) counts.
	for range 2 {
		if k := send("", "10.0.0.9"); k.Exit() != nil {
			t.Fatal("anonymous request rejected")
		}
	}
	if k := send("", "10.0.0.9"); k.Exit() == nil {
		t.Fatal("IP fallback not limited")
	}
}

// A quota's windows replace the plugin's in the headers, with no limiter
// compiled per quota: many distinct quotas all apply. A quota the policy
// cannot apply (a 1.5 s window) leaves the plugin's limits, with a warning.
func TestRateLimitingQuotaWindows(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	overrides := `{"dimension": "tenant", "value": "hourly", "limit": [4], "window_size": [3600]},
		{"dimension": "tenant", "value": "odd", "limit": [9], "window_size": [1.5]}`
	for i := range 600 {
		overrides += fmt.Sprintf(`, {"dimension": "tenant", "value": "t%d", "limit": [%d], "window_size": [60]}`, i, 10+i)
	}
	dims := instance[*DimensionsConfig](t, p.NewDimensions, `{
		"dimensions": [{"name": "tenant", "type": "header", "header": "X-Tenant"}], "overrides": [`+overrides+`]}`)
	rl := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [2], "window_size": [60], "identifier": "ip", "shared_key": "sluice", "namespace": "quota"}`)
	send := func(tenant string) *kongtest.Kong {
		k := kongtest.New(t, kongtest.Request{ForwardedIP: "10.0.0.1", Headers: http.Header{"X-Tenant": {tenant}}})
		k.Run(dims.Access)
		k.Run(rl.Access)
		return k
	}
	if h := send("hourly").ResponseHeaders(); h.Get("X-RateLimit-Limit-Hour") != "4" || h.Get("X-RateLimit-Remaining-Hour") != "3" || h.Get("X-RateLimit-Limit-Minute") != "" {
		t.Errorf("hourly: headers %v, want the quota's hour window only", h)
	}
	k := send("odd")
	if k.Exit() != nil || k.ResponseHeaders().Get("X-RateLimit-Limit-Minute") != "2" {
		t.Errorf("odd: exit %+v headers %v, want the plugin's limit", k.Exit(), k.ResponseHeaders())
	}
	if logs := strings.Join(k.Logs(), "\n"); !strings.Contains(logs, "ignoring quota override") {
		t.Errorf("odd: logs %q, want a warning", logs)
	}
	for i := range 600 {
		if h := send(fmt.Sprintf("t%d", i)).ResponseHeaders(); h.Get("X-RateLimit-Limit-Minute") != strconv.Itoa(10+i) {
			t.Fatalf("tenant t%d: headers %v, want its quota %d", i, h, 10+i)
		}
	}
}

func TestRateLimitingInvalidConfig(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [1, 2], "window_size": [60], "identifier": "header", "group_source": "x"}`)
	k := kongtest.New(t, kongtest.Request{})
	k.Run(cfg.Access)
	if e := k.Exit(); e == nil || e.Status != 500 {
		t.Fatalf("exit = %+v", e)
	}
	logs := strings.Join(k.Logs(), "\n")
	for _, want := range []string{"You must provide the same number of windows and limits", "No header name provided", "group_source"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %q lacks %q", logs, want)
		}
	}
}

func TestRateLimitingGlueWithPDKTestHarness(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [1], "window_size": [60], "error_code": 403, "error_message": "slow down"}`)
	env, err := pdktest.New(t, pdktest.Request{Method: "GET", Url: "http://example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	env.DoAccess(cfg)
	if env.ClientRes.Headers.Get("X-RateLimit-Remaining-Minute") != "0" {
		t.Errorf("headers = %v", env.ClientRes.Headers)
	}
	env, _ = pdktest.New(t, pdktest.Request{Method: "GET", Url: "http://example.com/"})
	env.DoAccess(cfg)
	if env.ClientRes.Status != 403 || string(env.ClientRes.Body) != `{"message":"slow down"}` {
		t.Errorf("status %d body %q", env.ClientRes.Status, env.ClientRes.Body)
	}
}

// BenchmarkRateLimitingAccess measures the access handler through the fake
// Kong: PDK framing over net.Pipe, identity, decision, headers.
func BenchmarkRateLimitingAccess(b *testing.B) {
	p := NewProcess(Options{})
	defer p.Close()
	cfg := p.NewRateLimiting().(*RateLimitingConfig)
	if err := cfg.UnmarshalJSON([]byte(`{"limit": [1000000000], "window_size": [60], "namespace": "bench"}`)); err != nil {
		b.Fatal(err)
	}
	req := kongtest.Request{Consumer: consumer("c1")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := kongtest.New(b, req)
		if calls := k.Run(cfg.Access); len(calls) != 2 || k.Exit() != nil {
			b.Fatalf("calls %q exit %+v", calls, k.Exit())
		}
	}
}

// BenchmarkDimensionsThenRateLimiting measures the business plugin and the
// rate limiter on one request, over 1000 tenants: four round trips in all.
func BenchmarkDimensionsThenRateLimiting(b *testing.B) {
	p := NewProcess(Options{})
	defer p.Close()
	dims := p.NewDimensions().(*DimensionsConfig)
	rl := p.NewRateLimiting().(*RateLimitingConfig)
	if err := dims.UnmarshalJSON([]byte(`{"dimensions": [{"type": "header", "header": "X-Tenant"}]}`)); err != nil {
		b.Fatal(err)
	}
	if err := rl.UnmarshalJSON([]byte(`{"limit": [1000000000], "window_size": [60], "identifier": "ip", "shared_key": "sluice", "namespace": "bench2"}`)); err != nil {
		b.Fatal(err)
	}
	const tenants = 1000
	reqs := make([]kongtest.Request, tenants)
	for i := range reqs {
		reqs[i] = kongtest.Request{Headers: http.Header{"X-Tenant": {"t" + strconv.Itoa(i)}}}
	}
	keys := map[string]bool{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := kongtest.New(b, reqs[i%tenants])
		n := len(k.Run(dims.Access))
		n += len(k.Run(rl.Access))
		if n != 4 || k.Exit() != nil {
			b.Fatalf("round trips %d, exit %+v", n, k.Exit())
		}
		if i < tenants {
			rec, _ := decodeShared(k.Shared()[DefaultSharedKey])
			keys[rec.Key] = true
		}
	}
	b.StopTimer()
	if want := min(b.N, tenants); len(keys) != want {
		b.Fatalf("%d distinct keys, want %d", len(keys), want)
	}
}

// Consumer groups from consumer tags: with scope_group, every consumer of
// the group shares one counter; a consumer outside it is counted by IP.
func TestRateLimitingConsumerGroupFromTags(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [1], "window_size": [60], "identifier": "consumer-group", "scope_group": "gold", "namespace": "groups"}`)
	send := func(c *entities.Consumer, ip string) (*kongtest.Kong, []string) {
		k := kongtest.New(t, kongtest.Request{Consumer: c, ForwardedIP: ip})
		return k, k.Run(cfg.Access)
	}
	k, calls := send(consumer("c1", "group:gold"), "10.0.0.1")
	if want := []string{"kong.client.get_consumer", "kong.response.set_headers"}; !slices.Equal(calls, want) || k.Exit() != nil {
		t.Fatalf("c1: calls %q exit %+v", calls, k.Exit())
	}
	if k, _ := send(consumer("c2", "group:silver", "group:gold"), "10.0.0.2"); k.Exit() == nil {
		t.Fatal("c2 of the same group has its own counter")
	}
	k, calls = send(consumer("c3", "group:silver"), "10.0.0.1")
	if want := []string{"kong.client.get_consumer", "kong.client.get_forwarded_ip", "kong.response.set_headers"}; !slices.Equal(calls, want) || k.Exit() != nil {
		t.Fatalf("c3 outside the group: calls %q exit %+v", calls, k.Exit())
	}
}
