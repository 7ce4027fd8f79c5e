package gateway

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
