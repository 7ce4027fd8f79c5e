package kongplugin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// runRLA runs n requests through rl and returns their kong.log lines; each
// must pass.
func runRLA(t *testing.T, rl *RateLimitingConfig, n int) []string {
	t.Helper()
	var logs []string
	for range n {
		k := kongtest.New(t, kongtest.Request{ForwardedIP: "10.0.0.1"})
		k.Run(rl.Access)
		if e := k.Exit(); e != nil {
			t.Fatalf("request exited %+v; logs %q", e, k.Logs())
		}
		logs = append(logs, k.Logs()...)
	}
	return logs
}

// A wrong config.redis.password is written to Kong's error log once, as an
// error naming the setting; requests are decided locally meanwhile.
func TestKongLogsWrongPassword(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "right"})
	p, _ := newTestProcess(t, Options{})
	rl := instance[*RateLimitingConfig](t, p.NewRateLimiting, fmt.Sprintf(`{"limit": [100], "window_size": [60], "namespace": "pw",
		"strategy": "redis", "sync_rate": 0, "redis": {"host": "127.0.0.1", "port": %d, "password": "wrong", "timeout": 500}}`, srv.Port()))
	logs := runRLA(t, rl, 4)
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "err: ") || !strings.Contains(logs[0], "wrongpass, check config.redis.password") ||
		!strings.Contains(logs[0], "namespace pw") {
		t.Fatalf("kong.log lines %q, want one error naming config.redis.password", logs)
	}
	if strings.Contains(logs[0], "right") || strings.Contains(logs[0], "wrong,") {
		t.Errorf("a password reached the log: %q", logs[0])
	}
}

// A Redis outage is written to Kong's error log once when it starts and
// once when it ends, however many requests probe in between.
func TestKongLogsOutageOnce(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	p, clk := newTestProcess(t, Options{})
	rl := instance[*RateLimitingConfig](t, p.NewRateLimiting, fmt.Sprintf(`{"limit": [100], "window_size": [60], "namespace": "out",
		"strategy": "redis", "sync_rate": 0, "redis": {"host": "127.0.0.1", "port": %d, "timeout": 500}}`, srv.Port()))
	if logs := runRLA(t, rl, 1); len(logs) != 0 {
		t.Fatalf("logs with Redis up: %q", logs)
	}
	srv.Stop()
	var logs []string
	for range 10 {
		logs = append(logs, runRLA(t, rl, 1)...)
		clk.Advance(1100 * time.Millisecond) // past the breaker's cool-down: every request probes
	}
	srv.Restart(t)
	for range 3 {
		clk.Advance(1100 * time.Millisecond)
		logs = append(logs, runRLA(t, rl, 1)...)
	}
	if len(logs) != 2 || !strings.HasPrefix(logs[0], "warn: ") || !strings.Contains(logs[0], "redis unavailable") ||
		!strings.HasPrefix(logs[1], "notice: ") || !strings.Contains(logs[1], "available again") {
		t.Fatalf("kong.log lines %q, want one warning down, one notice up", logs)
	}
}

// A store error met on every request (a counter key of the wrong type)
// lets each request through and is written to Kong's error log once per
// interval, then once with the number left out.
func TestKongLogsBadReplyOnce(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	p, clk := newTestProcess(t, Options{})
	rl := instance[*RateLimitingConfig](t, p.NewRateLimiting, fmt.Sprintf(`{"limit": [100], "window_size": [60], "namespace": "wt",
		"strategy": "redis", "sync_rate": 0, "redis": {"host": "127.0.0.1", "port": %d, "timeout": 500}}`, srv.Port()))
	if logs := runRLA(t, rl, 1); len(logs) != 0 {
		t.Fatalf("logs with Redis up: %q", logs)
	}
	srv.SpoilKeys(t)
	logs := runRLA(t, rl, 10)
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "err: ") || !strings.Contains(logs[0], "WRONGTYPE") {
		t.Fatalf("kong.log lines for 10 failures %q, want one error naming WRONGTYPE", logs)
	}
	clk.Advance(repeats.DefaultEvery)
	logs = runRLA(t, rl, 1)
	if len(logs) != 1 || !strings.Contains(logs[0], "(9 more like it since the previous line)") {
		t.Fatalf("kong.log lines after the interval %q, want one counting the 9 left out", logs)
	}
}
