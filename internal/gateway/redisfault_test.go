package gateway

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// TestRedisWrongPassword: a wrong config.redis.password is not "Redis is
// down": requests are decided locally, one error line names the setting,
// and sluice_redis_fault carries the reason.
func TestRedisWrongPassword(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{Password: "right"})
	up := echoUpstream(t)
	var logs syncBuffer
	g, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1000], window_size: [60], identifier: ip, namespace: pw, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d, password: wrong, timeout: 500}}
`, rs.Port()), up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	for range 5 {
		if r := do(t, "GET", base+"/", nil); r.status != 200 {
			t.Fatalf("with a wrong password: %d %s", r.status, r.body)
		}
	}
	if v := testutil.ToFloat64(g.metrics.redisFault.WithLabelValues("pw", "wrongpass")); v != 1 {
		t.Errorf(`sluice_redis_fault{namespace="pw",reason="wrongpass"} = %v, want 1`, v)
	}
	if v := testutil.ToFloat64(g.metrics.redisFallback.WithLabelValues("pw")); v != 1 {
		t.Errorf("sluice_redis_fallback = %v, want 1", v)
	}
	var errs []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], `"setting":"config.redis.password"`) || !strings.Contains(errs[0], `"reason":"wrongpass"`) {
		t.Fatalf("error lines %q, want one naming config.redis.password; log:\n%s", errs, logs.String())
	}
	if strings.Contains(logs.String(), "wrong\"") || strings.Contains(logs.String(), "right") {
		t.Errorf("a password reached the log:\n%s", logs.String())
	}
}

// TestRedisBadReplyLoggedOnce: a store error met on every request (a
// counter key of the wrong type) fails each request open and counts each
// in sluice_store_errors_total, but logs one line per interval, then one
// carrying the number left out.
func TestRedisBadReplyLoggedOnce(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	var logs syncBuffer
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	g, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1000], window_size: [60], identifier: ip, namespace: wt, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d, timeout: 500}}
`, rs.Port()), up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Now: func() time.Time { return *clock.Load() }})
	if r := do(t, "GET", base+"/", nil); r.status != 200 {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	rs.SpoilKeys(t)
	for i := range 10 {
		if r := do(t, "GET", base+"/", nil); r.status != 200 {
			t.Fatalf("request %d with a key of the wrong type: %d %s", i, r.status, r.body)
		}
	}
	if v := testutil.ToFloat64(g.metrics.storeErrors.WithLabelValues("rate-limiting-advanced")); v != 10 {
		t.Errorf("sluice_store_errors_total = %v, want 10", v)
	}
	failed := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(l, "counter store failed") {
				out = append(out, l)
			}
		}
		return out
	}
	if f := failed(); len(f) != 1 || !strings.Contains(f[0], "WRONGTYPE") || !strings.Contains(f[0], `"unlogged":0`) {
		t.Fatalf("lines for 10 failures %q, want one naming WRONGTYPE; log:\n%s", f, logs.String())
	}
	later := now.Add(repeats.DefaultEvery)
	clock.Store(&later)
	do(t, "GET", base+"/", nil)
	if f := failed(); len(f) != 2 || !strings.Contains(f[1], `"unlogged":9`) {
		t.Fatalf("lines after the interval %q, want a second one with unlogged 9", f)
	}
}

// TestRedisFallbackSeriesFromStart: sluice_redis_fallback exists, at 0,
// for every Redis-backed namespace as soon as its configuration is
// applied, before any request (a dashboard or an absent() alert sees it),
// and not for local ones.
func TestRedisFallbackSeriesFromStart(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	g, _ := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [10], window_size: [60], namespace: shared, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d}}
      - name: rate-limiting
        config: {minute: 10, policy: redis, redis: {host: 127.0.0.1, port: %d}}
  - name: l
    url: UPSTREAM
    routes: [{name: rl, paths: [/l]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [10], window_size: [60], namespace: alone, strategy: local}
`, rs.Port(), rs.Port()), up), Options{})
	if got, want := gaugeSeries(t, g, "sluice_redis_fallback"), "sluice_redis_fallback{namespace=shared}=0 sluice_redis_fallback{namespace=|rate-limiting}=0"; got != want {
		t.Fatalf("sluice_redis_fallback before any request: %s, want %s", got, want)
	}
}

// gaugeSeries lists the series of the named gauges of g's registry,
// sorted, as "name{label=value,...}=value" joined by spaces.
func gaugeSeries(t *testing.T, g *Gateway, names ...string) string {
	t.Helper()
	mfs, err := g.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s{%s}=%v", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	sort.Strings(got)
	return strings.Join(got, " ")
}

// TestRedisSeriesGoWithNamespace: a reload that drops a Redis-backed
// namespace drops its sluice_redis_fallback and sluice_redis_fault series,
// so no series of a removed namespace stays behind (at 0 or at 1).
func TestRedisSeriesGoWithNamespace(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{Password: "right"})
	up := echoUpstream(t)
	keep := fmt.Sprintf(`
  - name: k
    url: UPSTREAM
    routes: [{name: rk, paths: [/k]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [10], window_size: [60], namespace: keep, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d, password: right}}
`, rs.Port())
	g, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1000], window_size: [60], namespace: pw, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d, password: wrong, timeout: 500}}
`, rs.Port())+keep, up), Options{Logger: slog.New(slog.DiscardHandler)})
	if r := do(t, "GET", base+"/", nil); r.status != 200 {
		t.Fatalf("with a wrong password: %d %s", r.status, r.body)
	}
	series := func() string { return gaugeSeries(t, g, "sluice_redis_fallback", "sluice_redis_fault") }
	if s := series(); !strings.Contains(s, "sluice_redis_fault{namespace=pw,reason=wrongpass}=1") {
		t.Fatalf("before the reload: %s; want pw's wrongpass fault", s)
	}
	if err := g.Load([]byte(withUpstream("_format_version: \"3.0\"\nservices:"+keep, up)), "test"); err != nil {
		t.Fatal(err)
	}
	if s, want := series(), "sluice_redis_fallback{namespace=keep}=0"; s != want {
		t.Fatalf("after the reload: %s; want only %s", s, want)
	}
}

// TestOSSFaultTolerantFalseRedisDown: the OSS plugin with fault_tolerant
// false answers 500 while Redis is down, as Kong does, instead of counting
// on this node; with true, requests go on.
func TestOSSFaultTolerantFalseRedisDown(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - name: closed
        paths: [/closed]
        plugins:
          - name: rate-limiting
            config: {minute: 100, policy: redis, fault_tolerant: false, redis: {host: 127.0.0.1, port: %d}}
      - name: open
        paths: [/open]
        plugins:
          - name: rate-limiting
            config: {minute: 100, policy: redis, fault_tolerant: true, redis: {host: 127.0.0.1, port: %d}}
`, rs.Port(), rs.Port()), up), Options{})
	for _, p := range []string{"/closed", "/open"} {
		if r := do(t, "GET", base+p, nil); r.status != 200 {
			t.Fatalf("%s with Redis up: %d %s", p, r.status, r.body)
		}
	}
	rs.Stop()
	for range 3 {
		if r := do(t, "GET", base+"/closed", nil); r.status != 500 || !strings.Contains(string(r.body), "An unexpected error occurred") {
			t.Fatalf("fault_tolerant false with Redis down: %d %s, want 500", r.status, r.body)
		}
		if r := do(t, "GET", base+"/open", nil); r.status != 200 {
			t.Fatalf("fault_tolerant true with Redis down: %d %s, want 200", r.status, r.body)
		}
	}
}

// TestNamespaceSharedAcrossSettings: two rate-limiting-advanced instances
// of one namespace configured with different store settings share one
// counter store, the first's, as in Kong, and the difference is logged as
// an error naming both. A disabled instance takes no part.
func TestNamespaceSharedAcrossSettings(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	var logs syncBuffer
	_, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - name: off
        paths: [/off]
        plugins:
          - name: rate-limiting-advanced
            enabled: false
            config: {limit: [3], window_size: [60], namespace: mix, identifier: ip, sync_rate: 1, strategy: redis,
                     redis: {host: 127.0.0.1, port: 1}}
      - name: a
        paths: [/a]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [3], window_size: [60], namespace: mix, identifier: ip, strategy: redis, sync_rate: 0,
                     redis: {host: 127.0.0.1, port: %d}}
      - name: b
        paths: [/b]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [3], window_size: [60], namespace: mix, identifier: ip}
`, rs.Port()), up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	for range 3 {
		if r := do(t, "GET", base+"/a", nil); r.status != 200 {
			t.Fatalf("/a: %d", r.status)
		}
	}
	if r := do(t, "GET", base+"/b", nil); r.status != 429 {
		t.Fatalf("/b after 3 on /a in one namespace: %d, want 429", r.status)
	}
	if !strings.Contains(logs.String(), `namespace \"mix\" has other counter syncing settings`) ||
		!strings.Contains(logs.String(), "services[0].routes[1].plugins[0]") || strings.Contains(logs.String(), "routes[0].plugins[0]") {
		t.Errorf("no error naming the namespace and both instances:\n%s", logs.String())
	}
}
