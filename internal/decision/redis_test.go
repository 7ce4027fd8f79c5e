package decision

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/internal/testservers"
)

func redisConfig(r *testservers.RedisServer, limit int) string {
	return fmt.Sprintf(`
store:
  type: redis
  redis: {host: %s, port: %d, clock: service, timeout: 2s}
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: s
    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: sliding}
`, r.Host(), r.Port(), limit, limit)
}

// Two service instances (two nodes) share counters through a real
// redis-server, exactly, under 64 concurrent gRPC callers; a reload keeps
// the counters.
func TestRedisStoreSharedAndExact(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	clk := newClock(t0)
	var clients []func() (int, int)
	var svcs []*Service
	for range 2 {
		s, err := Open(mustParse(t, redisConfig(r, 200)), clk.opts())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		svcs = append(svcs, s)
		c, _ := serveGRPC(t, s)
		clients = append(clients, func() (int, int) {
			resp := call(t, c, request("d", desc("k", "x"), desc("s", "x")))
			n := [2]int{}
			for i, st := range resp.Statuses {
				if st.Code == OK {
					n[i] = 1
				}
			}
			return n[0], n[1]
		})
	}
	var mu sync.Mutex
	fixed, sliding := 0, 0
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				f, s := clients[i%2]()
				mu.Lock()
				fixed += f
				sliding += s
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fixed != 200 || sliding != 200 {
		t.Fatalf("allowed fixed %d, sliding %d of 320 calls; want 200 each", fixed, sliding)
	}
	// Raise the limit on one node: the other node's hits are still counted.
	if err := svcs[0].Reload([]byte(redisConfig(r, 201))); err != nil {
		t.Fatal(err)
	}
	if f, s := clients[0](); f != 1 || s != 1 {
		t.Errorf("after reload to 201: %d %d, want one more each", f, s)
	}
	if f, s := clients[0](); f != 0 || s != 0 {
		t.Errorf("202nd call: %d %d, want denied", f, s)
	}
	// Keys are length-prefixed inside the store's hash tag.
	keys := fmt.Sprint(r.Do(t, "KEYS", "*"))
	if !strings.Contains(keys, "decision") || !strings.Contains(keys, "3:rls1:d1:k1:x") {
		t.Errorf("redis keys %s", keys)
	}
}

// With Redis gone the store decides with local counters: the service keeps
// answering, and never with an error.
func TestRedisDownFallsBack(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	s, err := Open(mustParse(t, redisConfig(r, 2)), newClock(t0).opts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "y"))
	runSteps(t, c, []step{{"1", k, OK, codes_(OK), []uint32{1}, nil}})
	r.Stop()
	runSteps(t, c, []step{
		{"2 (local)", k, OK, codes_(OK), nil, nil},
		{"3 (local)", k, OVER, codes_(OVER), nil, nil},
	})
}

// The service exports its Redis store's state as the gateway does:
// sluice_redis_fallback while it counts locally and, for a fault,
// sluice_redis_fault with the reason. A Redis down at start is no error:
// the first call falls back and the first after the cool-down, with Redis
// back, returns to it.
func TestRedisStateMetrics(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	r.Stop()
	clk := newClock(t0)
	s, err := Open(mustParse(t, redisConfig(r, 2)), clk.opts())
	if err != nil {
		t.Fatalf("Open with redis down: %v", err)
	}
	defer s.Close()
	if n := testutil.CollectAndCount(s.m.redisFallback); n != 1 {
		t.Errorf("%d sluice_redis_fallback series before any call, want 1 (at 0)", n)
	}
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "z"))
	gauge := func(name string, labels ...string) float64 {
		t.Helper()
		switch name {
		case "fallback":
			return testutil.ToFloat64(s.m.redisFallback.WithLabelValues(labels...))
		case "fault":
			return testutil.ToFloat64(s.m.redisFault.WithLabelValues(labels...))
		}
		return testutil.ToFloat64(s.m.redisChanges.WithLabelValues(labels...))
	}
	runSteps(t, c, []step{{"1 (redis down)", k, OK, codes_(OK), nil, nil}})
	if v := gauge("fallback", "decision"); v != 1 {
		t.Errorf("sluice_redis_fallback with redis down = %v, want 1", v)
	}
	r.Restart(t)
	clk.add(2 * time.Second) // past the cool-down
	runSteps(t, c, []step{{"2 (redis back)", k, OK, codes_(OK), []uint32{1}, nil}})
	if v := gauge("fallback", "decision"); v != 0 {
		t.Errorf("sluice_redis_fallback with redis back = %v, want 0", v)
	}
	if f, c := gauge("changes", "decision", "fallback"), gauge("changes", "decision", "connected"); f != 1 || c != 1 {
		t.Errorf("sluice_redis_state_changes_total fallback %v connected %v, want 1 each", f, c)
	}
	if n := testutil.CollectAndCount(s.m.redisFault); n != 0 {
		t.Errorf("%d sluice_redis_fault series without a fault, want none", n)
	}
}

// A wrong password: answered locally, sluice_redis_fault carries the
// reason, and the log names the setting.
func TestRedisWrongPasswordMetric(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{Password: "right"})
	var logs bytes.Buffer
	opts := newClock(t0).opts()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Open(mustParse(t, strings.Replace(redisConfig(r, 2), "clock: service", "clock: service, password: wrong", 1)), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	runSteps(t, c, []step{{"1 (wrong password)", request("d", desc("k", "w")), OK, codes_(OK), nil, nil}})
	if v := testutil.ToFloat64(s.m.redisFault.WithLabelValues("decision", "wrongpass")); v != 1 {
		t.Errorf(`sluice_redis_fault{namespace="decision",reason="wrongpass"} = %v, want 1`, v)
	}
	if v := testutil.ToFloat64(s.m.redisFallback.WithLabelValues("decision")); v != 1 {
		t.Errorf("sluice_redis_fallback = %v, want 1", v)
	}
	if !strings.Contains(logs.String(), "setting=config.redis.password") || strings.Contains(logs.String(), "right") {
		t.Errorf("log does not name the setting, or shows the password:\n%s", logs.String())
	}
}

// A store error met on every call (a counter key of the wrong type) fails
// each call and counts each in sluice_decision_store_errors_total, but
// logs one line per interval, then one carrying the number left out.
func TestRedisBadReplyLoggedOnce(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	var logs syncLog
	clk := newClock(t0)
	opts := clk.opts()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Open(mustParse(t, redisConfig(r, 100)), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "wrongtype"))
	runSteps(t, c, []step{{"1", k, OK, codes_(OK), []uint32{99}, nil}})
	r.SpoilKeys(t)
	for i := range 10 {
		if _, err := c.ShouldRateLimit(t.Context(), k); err == nil {
			t.Fatalf("call %d with a key of the wrong type: no error", i)
		}
	}
	if v := testutil.ToFloat64(s.m.storeErrors); v != 10 {
		t.Errorf("sluice_decision_store_errors_total = %v, want 10", v)
	}
	failed := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(l, "store failed") {
				out = append(out, l)
			}
		}
		return out
	}
	if f := failed(); len(f) != 1 || !strings.Contains(f[0], "WRONGTYPE") || !strings.Contains(f[0], "unlogged=0") {
		t.Fatalf("lines for 10 failures %q, want one naming WRONGTYPE; log:\n%s", f, logs.String())
	}
	clk.add(repeats.DefaultEvery)
	_, _ = c.ShouldRateLimit(t.Context(), k)
	if f := failed(); len(f) != 2 || !strings.Contains(f[1], "unlogged=9") {
		t.Fatalf("lines after the interval %q, want a second one with unlogged=9", f)
	}
}

// syncLog is a log destination safe for the service's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The HTTP check logs a store failure met on every request as the gRPC
// path does: once per interval, with the number left out.
func TestRedisBadReplyCheckLoggedOnce(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	var logs syncLog
	opts := newClock(t0).opts()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg := strings.Replace(checkConfig(t, "403"), "store: {type: memory}",
		fmt.Sprintf("store: {type: redis, redis: {host: %s, port: %d, clock: service, timeout: 2s}}", r.Host(), r.Port()), 1)
	s, err := Open(mustParse(t, cfg), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	hdr := map[string]string{"X-Original-URI": "/x", "X-Original-Method": "GET", "X-Real-IP": "203.0.113.5"}
	if res, _ := doGet(t, srv.URL+"/check", hdr); res.StatusCode != 200 {
		t.Fatalf("first check: %d", res.StatusCode)
	}
	r.SpoilKeys(t)
	for range 10 {
		doGet(t, srv.URL+"/check", hdr)
	}
	if n := strings.Count(logs.String(), "check failed"); n != 1 {
		t.Fatalf("%d \"check failed\" lines for 10 failing checks, want 1; log:\n%s", n, logs.String())
	}
}
