package kongplugin

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/client"
	"github.com/Kong/go-pdk/entities"
	pdktest "github.com/Kong/go-pdk/test"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/ratelimit"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestProcess(t *testing.T, opts Options) (*Process, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	p := NewProcess(opts)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p, clk
}

// instance builds a plugin instance the way go-pdk's server does: the
// constructor, then json.Unmarshal of the config Kong sends (with nulls for
// unset fields and the keys Kong adds).
func instance[T any](t *testing.T, newFn func() any, config string) T {
	t.Helper()
	cfg := newFn()
	if err := json.Unmarshal([]byte(config), cfg); err != nil {
		t.Fatalf("decoding config: %v", err)
	}
	return cfg.(T)
}

func consumer(id string, tags ...string) *entities.Consumer {
	return &entities.Consumer{Id: id, Username: "user-" + id, Tags: tags}
}

func TestDimensionsPublishesKeyInOneCall(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{
		"dimensions": [{"type": "header", "header": "X-Tenant"}, {"type": "consumer"}],
		"on_missing": null, "overrides": null, "jwt": null,
		"route_id": null, "__seq__": 3, "__plugin_id": "p1"}`)

	k := kongtest.New(t, kongtest.Request{Headers: http.Header{"X-Tenant": {"acme"}}, Consumer: consumer("c1")})
	calls := k.Run(cfg.Access)
	want := []string{"kong.client.get_consumer", "kong.request.get_header", "kong.ctx.shared.set"}
	if !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	rec, err := decodeShared(k.Shared()[DefaultSharedKey])
	if err != nil {
		t.Fatal(err)
	}
	if want := ratelimit.Key("acme", "c1"); rec.Key != want {
		t.Errorf("key = %q, want %q", rec.Key, want)
	}
	if rec.Quota != nil || rec.Groups != nil {
		t.Errorf("unexpected quota %v or groups %v", rec.Quota, rec.Groups)
	}
	if k.Exit() != nil {
		t.Errorf("business plugin exited: %+v", k.Exit())
	}
}

func TestDimensionsMissingDimensionWritesNothing(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "header", "header": "X-Tenant"}]}`)
	k := kongtest.New(t, kongtest.Request{})
	calls := k.Run(cfg.Access)
	if want := []string{"kong.request.get_header"}; !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	if _, ok := k.Shared()[DefaultSharedKey]; ok {
		t.Errorf("shared entry written for a skipped key: %v", k.Shared())
	}
}

func TestDimensionsGroupsAndQuota(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{
		"dimensions": [{"type": "consumer", "field": "username"}],
		"overrides": [{"dimension": "consumer:username", "value": "user-c1", "limit": [100, 5], "window_size": [60, 1], "window_type": "fixed"}],
		"groups_from": "consumer_tags", "shared_key": "biz"}`)
	k := kongtest.New(t, kongtest.Request{Consumer: consumer("c1", "group:gold", "team:x", "group:beta")})
	calls := k.Run(cfg.Access)
	// The consumer dimension's fetch serves the tags too.
	if want := []string{"kong.client.get_consumer", "kong.ctx.shared.set"}; !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	rec, err := decodeShared(k.Shared()["biz"])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Groups, []string{"gold", "beta"}) {
		t.Errorf("groups = %q", rec.Groups)
	}
	want := []ratelimit.Limit{ratelimit.PerSecond(5).Fixed(), ratelimit.PerMinute(100).Fixed()}
	if !slices.Equal(rec.Quota, want) || !rec.QuotaAlgorithmSet {
		t.Errorf("quota = %v (set %v), want %v", rec.Quota, rec.QuotaAlgorithmSet, want)
	}
}

func TestDimensionsGroupsFromHeader(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "ip"}], "groups_from": "header", "groups_header": "X-Groups"}`)
	k := kongtest.New(t, kongtest.Request{ForwardedIP: "10.0.0.7", Headers: http.Header{"X-Groups": {"gold, silver"}}})
	calls := k.Run(cfg.Access)
	if want := []string{"kong.client.get_forwarded_ip", "kong.request.get_header", "kong.ctx.shared.set"}; !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	rec, _ := decodeShared(k.Shared()[DefaultSharedKey])
	if !slices.Equal(rec.Groups, []string{"gold", "silver"}) || rec.Key != ratelimit.Key("10.0.0.7") {
		t.Errorf("record = %+v", rec)
	}
}

func TestInvalidConfigAnswers500(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	for name, newCfg := range map[string]func() func(*pdk.PDK){
		"dimensions": func() func(*pdk.PDK) {
			return instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "nope"}], "groups_from": "x"}`).Access
		},
		"concurrency": func() func(*pdk.PDK) {
			return instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 0}`).Access
		},
	} {
		t.Run(name, func(t *testing.T) {
			k := kongtest.New(t, kongtest.Request{})
			k.Run(newCfg())
			e := k.Exit()
			if e == nil || e.Status != 500 || string(e.Body) != `{"message":"An unexpected error occurred"}` {
				t.Fatalf("exit = %+v", e)
			}
			if logs := k.Logs(); len(logs) != 1 {
				t.Errorf("logs = %q, want the validation error", logs)
			}
		})
	}
}

func TestDimensionsCompiledOncePerConfig(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	// Kong restarts instances with new __seq__ values; the compiled form is
	// shared.
	for seq := range 3 {
		cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "method"}], "__seq__": `+string(rune('1'+seq))+`}`)
		kongtest.New(t, kongtest.Request{}).Run(cfg.Access)
	}
	if n := p.dims.len(); n != 1 {
		t.Errorf("compiled configs = %d, want 1", n)
	}
}

// scriptedWatch is a config centre driven by the test.
type scriptedWatch struct {
	mu      sync.Mutex
	srcs    []dimensions.Source
	updates []func([][]byte) error
	stopped int
}

func (w *scriptedWatch) watch(src dimensions.Source, update func([][]byte) error) (func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.srcs = append(w.srcs, src)
	w.updates = append(w.updates, update)
	return func() { w.mu.Lock(); w.stopped++; w.mu.Unlock() }, nil
}

func TestDimensionsLiveOverrides(t *testing.T) {
	w := &scriptedWatch{}
	p, _ := newTestProcess(t, Options{WatchOverrides: w.watch})
	conf := `{"dimensions": [{"name": "tenant", "type": "header", "header": "X-Tenant"}], "overrides_file": "/etc/sluice/overrides.json"}`
	run := func() sharedRecord {
		// A new instance each time, as Kong restarts them.
		cfg := instance[*DimensionsConfig](t, p.NewDimensions, conf)
		k := kongtest.New(t, kongtest.Request{Headers: http.Header{"X-Tenant": {"acme"}}})
		k.Run(cfg.Access)
		rec, err := decodeShared(k.Shared()[DefaultSharedKey])
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if rec := run(); rec.Quota != nil {
		t.Fatalf("quota before any overrides: %v", rec.Quota)
	}
	if len(w.updates) != 1 || w.srcs[0].File != "/etc/sluice/overrides.json" {
		t.Fatalf("watches = %v", w.srcs)
	}
	if err := w.updates[0]([][]byte{[]byte(`{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [7], "window_size": [60]}]}`)}); err != nil {
		t.Fatal(err)
	}
	if rec := run(); !slices.Equal(rec.Quota, []ratelimit.Limit{ratelimit.PerMinute(7)}) {
		t.Fatalf("quota after update = %v", rec.Quota)
	}
	// A broken document is rejected and keeps the table in force.
	if err := w.updates[0]([][]byte{[]byte(`{"overrides": [{"dimension": "tenant"}]}`)}); err == nil {
		t.Error("a broken overrides document was accepted")
	}
	if rec := run(); !slices.Equal(rec.Quota, []ratelimit.Limit{ratelimit.PerMinute(7)}) {
		t.Fatalf("quota after a bad update = %v", rec.Quota)
	}
	if len(w.updates) != 1 {
		t.Errorf("watch started %d times, want once per process", len(w.updates))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if w.stopped != 1 {
		t.Errorf("watch stopped %d times", w.stopped)
	}
}

func TestConcurrencyAcquireReleaseAndTTL(t *testing.T) {
	p, clk := newTestProcess(t, Options{})
	cfg := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 2, "lease_ttl": 30, "identifier": "consumer", "namespace": "poll"}`)
	req := kongtest.Request{Consumer: consumer("c1")}
	var open []*kongtest.Kong
	for i := range 2 {
		k := kongtest.New(t, req)
		calls := k.Run(cfg.Access)
		if want := []string{"kong.client.get_consumer", "kong.response.set_headers", "kong.ctx.shared.set"}; !slices.Equal(calls, want) {
			t.Fatalf("request %d: PDK calls = %q, want %q", i, calls, want)
		}
		if k.Exit() != nil {
			t.Fatalf("request %d denied", i)
		}
		open = append(open, k)
	}
	k := kongtest.New(t, req)
	calls := k.Run(cfg.Access)
	if want := []string{"kong.client.get_consumer", "kong.response.exit"}; !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	e := k.Exit()
	if e == nil || e.Status != 429 || string(e.Body) != `{"message":"Too many concurrent requests"}` ||
		e.Headers.Get("Retry-After") != "30" || e.Headers.Get("X-Concurrency-Limit") != "2" ||
		e.Headers.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("exit = %+v", e)
	}
	// The log phase of the denied request finds no lease: one call, no
	// release.
	if calls := k.Run(cfg.Log); !slices.Equal(calls, []string{"kong.ctx.shared.get"}) {
		t.Fatalf("log calls = %q", calls)
	}
	// Another consumer is counted apart.
	other := kongtest.New(t, kongtest.Request{Consumer: consumer("c2")})
	if other.Run(cfg.Access); other.Exit() != nil {
		t.Fatal("other consumer denied")
	}
	// The log phase releases the first lease: one PDK call.
	if calls := open[0].Run(cfg.Log); !slices.Equal(calls, []string{"kong.ctx.shared.get"}) {
		t.Fatalf("log calls = %q", calls)
	}
	k = kongtest.New(t, req)
	if k.Run(cfg.Access); k.Exit() != nil {
		t.Fatal("denied after a release")
	}
	// Two leases held, none released: the TTL frees them.
	k = kongtest.New(t, req)
	if k.Run(cfg.Access); k.Exit() == nil {
		t.Fatal("allowed over the limit")
	}
	clk.Advance(30 * time.Second)
	k = kongtest.New(t, req)
	if k.Run(cfg.Access); k.Exit() != nil {
		t.Fatal("denied after the leases' TTL")
	}
}

func TestConcurrencyUnauthenticatedFallsBackToIP(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 1, "identifier": "consumer"}`)
	k := kongtest.New(t, kongtest.Request{ForwardedIP: "10.1.1.1"})
	calls := k.Run(cfg.Access)
	want := []string{"kong.client.get_consumer", "kong.client.get_credential", "kong.client.get_forwarded_ip", "kong.response.set_headers", "kong.ctx.shared.set"}
	if !slices.Equal(calls, want) {
		t.Fatalf("PDK calls = %q, want %q", calls, want)
	}
	m, _ := k.Shared()[LeaseSharedKey].(map[string]any)
	if m["key"] != ratelimit.Key("ip", "10.1.1.1") {
		t.Errorf("lease = %v", m)
	}
	k2 := kongtest.New(t, kongtest.Request{ForwardedIP: "10.1.1.1", Credential: &client.AuthenticatedCredential{Id: "cred"}})
	if k2.Run(cfg.Access); k2.Exit() != nil {
		t.Error("credential key shares the IP's slot")
	}
}

// The go-pdk test harness drives the same glue: shared context written by
// the business plugin, exit status and body of the concurrency plugin.
func TestGlueWithPDKTestHarness(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	dims := instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "consumer"}, {"type": "method"}]}`)
	env, err := pdktest.New(t, pdktest.Request{Method: "GET", Url: "http://example.com/x"})
	if err != nil {
		t.Fatal(err)
	}
	env.DoAccess(dims)
	rec, err := decodeShared(env.Ctx.Store[DefaultSharedKey])
	if err != nil {
		t.Fatal(err)
	}
	// The harness's consumer is always "001".
	if want := ratelimit.Key("001", "GET"); rec.Key != want {
		t.Errorf("key = %q, want %q", rec.Key, want)
	}

	conc := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 1, "error_code": 503, "error_message": "busy", "hide_client_headers": true}`)
	env1, _ := pdktest.New(t, pdktest.Request{Method: "GET", Url: "http://example.com/poll"})
	env1.DoAccess(conc)
	env2, _ := pdktest.New(t, pdktest.Request{Method: "GET", Url: "http://example.com/poll"})
	env2.DoAccess(conc)
	if env2.ClientRes.Status != 503 || string(env2.ClientRes.Body) != `{"message":"busy"}` {
		t.Fatalf("second request: status %d body %q", env2.ClientRes.Status, env2.ClientRes.Body)
	}
	if env2.ClientRes.Headers.Get("Retry-After") != "" {
		t.Errorf("hidden headers sent: %v", env2.ClientRes.Headers)
	}
}

func TestValidate(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	for _, tc := range []struct {
		newFn  func() any
		config string
		want   string // "" means valid
	}{
		{p.NewRateLimiting, `{"limit": [10], "window_size": [60], "strategy": "redis", "sync_rate": 0, "redis": {"host": "nowhere.invalid", "port": 6379}}`, ""},
		{p.NewRateLimiting, `{"limit": [10], "window_size": [60, 1]}`, "You must provide the same number of windows and limits"},
		{p.NewRateLimiting, `{"limit": [10], "window_size": [60], "shared_key": "sluice", "compound_identifier": ["ip", "service"]}`, "cannot be combined"},
		{p.NewDimensions, `{"dimensions": [{"type": "header", "header": "X-A"}], "overrides_file": "/nonexistent/overrides.json"}`, ""},
		{p.NewDimensions, `{"dimensions": [], "overrides_etcd_prefix": "/x/"}`, "overrides_etcd_endpoints"},
		{p.NewConcurrency, `{"limit": 3, "strategy": "redis", "redis": {"host": "nowhere.invalid", "port": 6379}}`, ""},
		{p.NewConcurrency, `{"limit": 3, "strategy": "redis"}`, "No redis config provided"},
	} {
		cfg := tc.newFn()
		if err := json.Unmarshal([]byte(tc.config), cfg); err != nil {
			t.Fatal(err)
		}
		err := cfg.(interface{ Validate() error }).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.config, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig)):
			t.Errorf("%s: error %v, want one containing %q", tc.config, err, tc.want)
		}
	}
}

// A config that fails for a reason outside it (here: its overrides file
// does not exist yet) is compiled again once retryCompile has passed, and
// works as soon as the reason is gone.
func TestCompileFailureIsRetried(t *testing.T) {
	p, clk := newTestProcess(t, Options{})
	file := t.TempDir() + "/overrides.json"
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, `{"dimensions": [{"type": "method"}], "overrides_file": "`+file+`"}`)
	run := func() *kongtest.Exit {
		k := kongtest.New(t, kongtest.Request{})
		k.Run(cfg.Access)
		return k.Exit()
	}
	if e := run(); e == nil || e.Status != 500 {
		t.Fatalf("missing overrides file: exit %+v", e)
	}
	if err := os.WriteFile(file, []byte(`{"overrides": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if e := run(); e == nil || e.Status != 500 {
		t.Fatalf("retried before retryCompile: exit %+v", e)
	}
	clk.Advance(retryCompile)
	if e := run(); e != nil {
		t.Fatalf("not retried after retryCompile: exit %+v", e)
	}
}

func TestConcurrencyByDimensionKey(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	cfg := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 1, "identifier": "dimension"}`)
	req := kongtest.Request{ForwardedIP: "10.0.0.1", Shared: map[string]any{DefaultSharedKey: map[string]any{"key": "tenant-a"}}}
	k := kongtest.New(t, req)
	if calls := k.Run(cfg.Access); !slices.Equal(calls, []string{"kong.ctx.shared.get", "kong.response.set_headers", "kong.ctx.shared.set"}) {
		t.Fatalf("PDK calls = %q", calls)
	}
	if m, _ := k.Shared()[LeaseSharedKey].(map[string]any); m["key"] != ratelimit.Key("dimension", "tenant-a") {
		t.Errorf("lease = %v", m)
	}
	// Same IP, no key: counted by IP, apart from the tenant.
	k = kongtest.New(t, kongtest.Request{ForwardedIP: "10.0.0.1"})
	if k.Run(cfg.Access); k.Exit() != nil {
		t.Fatal("IP fallback shares the tenant's slot")
	}
	k = kongtest.New(t, req)
	if k.Run(cfg.Access); k.Exit() == nil {
		t.Fatal("second lease of the tenant allowed")
	}
}

// A sluice-concurrency config evicted from the cache keeps its store for
// the lease TTL: a lease taken before the eviction still counts against the
// recompiled config, and the log phase releases it.
func TestConcurrencyEvictedConfigKeepsLeases(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	p.conc.max = 1
	a := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 1, "identifier": "consumer", "namespace": "evict-a"}`)
	b := instance[*ConcurrencyConfig](t, p.NewConcurrency, `{"limit": 1, "identifier": "consumer", "namespace": "evict-b"}`)
	req := kongtest.Request{Consumer: consumer("c1")}
	held := kongtest.New(t, req)
	if held.Run(a.Access); held.Exit() != nil {
		t.Fatal("first request denied")
	}
	if k := kongtest.New(t, req); k.Run(b.Access) == nil || k.Exit() != nil { // evicts a
		t.Fatal("b denied")
	}
	if n := p.conc.len(); n != 1 {
		t.Fatalf("%d cached concurrency configs; want 1", n)
	}
	k := kongtest.New(t, req)
	if k.Run(a.Access); k.Exit() == nil {
		t.Fatal("recompiled a forgot the lease taken before the eviction")
	}
	held.Run(a.Log)
	k = kongtest.New(t, req)
	if k.Run(a.Access); k.Exit() != nil {
		t.Fatal("denied after the held lease was released")
	}
}
