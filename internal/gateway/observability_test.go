package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seed-008287da/sluice/internal/testservers"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const obsConfig = `
_format_version: "3.0"
services:
  - name: svc
    url: http://127.0.0.1:9
    routes:
      - name: term
        paths: [/]
        plugins:
          - name: request-termination
            config: {status_code: 200, message: hi}
          - name: rate-limiting-advanced
            config: {limit: [1], window_size: [60], window_type: fixed, identifier: ip, namespace: obs}
`

// TestObservability checks the access log line, the decision metrics and
// the OpenTelemetry span of each plugin decision.
func TestObservability(t *testing.T) {
	var logs syncBuffer
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(t.Context()) }()
	g, base := startGateway(t, obsConfig, Options{
		Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
		AccessLog: true,
		Tracer:    tp.Tracer("test"),
	})
	if r := do(t, "GET", base+"/a", nil); r.status != 200 || !strings.Contains(r.body, `"message":"hi"`) {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", base+"/a", nil); r.status != 429 {
		t.Fatalf("second: %d %s", r.status, r.body)
	}

	lines := accessLines(t, logs.String())
	if len(lines) != 2 {
		t.Fatalf("%d access lines:\n%s", len(lines), logs.String())
	}
	if l := lines[1]; l["status"] != float64(429) || l["route"] != "term" || l["path"] != "/a" || l["client_ip"] != "127.0.0.1" ||
		l["plugin.rate-limiting-advanced"] != "denied" || l["request_id"] == "" {
		t.Errorf("access line: %v", l)
	}

	m := g.Metrics()
	if n := testutil.ToFloat64(m.decisions.WithLabelValues("rate-limiting-advanced", "denied")); n != 1 {
		t.Errorf("denied decisions %v", n)
	}
	if n := testutil.ToFloat64(m.decisions.WithLabelValues("rate-limiting-advanced", "allowed")); n != 1 {
		t.Errorf("allowed decisions %v", n)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("term", "svc", "429")); n != 1 {
		t.Errorf("429 requests %v", n)
	}
	if n := testutil.CollectAndCount(m.decisionTime); n != 2 {
		t.Errorf("%d latency series, want one per plugin", n)
	}

	var outcomes []string
	for _, s := range rec.Ended() {
		if s.Name() != "sluice.plugin rate-limiting-advanced" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "sluice.outcome" {
				outcomes = append(outcomes, a.Value.AsString())
			}
		}
	}
	if strings.Join(outcomes, ",") != "allowed,denied" {
		t.Errorf("span outcomes %v", outcomes)
	}
}

func counterValue(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// TestRedisFallbackMetric stops the Redis of a namespace: requests are
// still decided (locally) and sluice_redis_fallback turns 1; once Redis is
// back it returns to 0.
func TestRedisFallbackMetric(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	g, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1000], window_size: [60], identifier: ip, namespace: fb, strategy: redis, sync_rate: 0,
                 redis: {host: 127.0.0.1, port: %d, timeout: 100}}
`, rs.Port()), up), Options{})
	gauge := func() float64 { return testutil.ToFloat64(g.metrics.redisFallback.WithLabelValues("fb")) }
	waitFor := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			if r := do(t, "GET", base+"/", nil); r.status != 200 {
				t.Fatalf("request while Redis changes: %d %s", r.status, r.body)
			}
			if gauge() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sluice_redis_fallback %v, want %v", gauge(), want)
			}
			<-time.After(20 * time.Millisecond) // poll interval, bounded by the deadline
		}
	}
	if r := do(t, "GET", base+"/", nil); r.status != 200 || r.header.Get("X-RateLimit-Remaining-Minute") != "999" {
		t.Fatalf("with Redis: %d %v", r.status, r.header)
	}
	rs.Stop()
	waitFor(1)
	rs.Restart(t)
	waitFor(0)
	// One change each way: probes of the stopped Redis are not changes.
	for _, state := range []string{"fallback", "connected"} {
		if n := counterValue(g.metrics.redisChanges.WithLabelValues("fb", state)); n != 1 {
			t.Errorf("sluice_redis_state_changes_total{state=%q} %v, want 1", state, n)
		}
	}
}

// accessLines returns the access log lines among the JSON log lines of
// logs, decoded.
func accessLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "access" {
			lines = append(lines, m)
		}
	}
	return lines
}
