package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// TestRouteMetrics: a proxied request is seen in the request and upstream
// latency histograms and the byte counters of its route, a request sluice
// answers in the request histogram only, and a 429 in the denials by
// plugin, namespace and window.
func TestRouteMetrics(t *testing.T) {
	up := echoUpstream(t)
	g, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: svc
    url: UPSTREAM
    routes:
      - name: open
        paths: [/open]
      - name: limited
        paths: [/limited]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [100, 1], window_size: [3600, 60], window_type: fixed, identifier: ip, namespace: rm}
      - name: oss
        paths: [/oss]
        plugins:
          - name: rate-limiting
            config: {hour: 1, policy: local}
`, up), Options{})
	req, err := http.NewRequest("POST", base+"/open", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.ContentLength <= 0 {
		t.Fatalf("proxied: %d, length %d", res.StatusCode, res.ContentLength)
	}
	m := g.Metrics()
	if n := testutil.ToFloat64(m.bytesIn.WithLabelValues("open", "svc")); n != 5 {
		t.Errorf("request bytes %v, want 5", n)
	}
	if n := testutil.ToFloat64(m.bytesOut.WithLabelValues("open", "svc")); n != float64(res.ContentLength) {
		t.Errorf("response bytes %v, want %d", n, res.ContentLength)
	}
	if n := histCount(t, m, "sluice_upstream_duration_seconds", "open"); n != 1 {
		t.Errorf("upstream latency count %d", n)
	}
	for i, want := range []int{200, 429, 429} {
		if r := do(t, "GET", base+"/limited", nil); r.status != want {
			t.Fatalf("limited %d: %d %s", i, r.status, r.body)
		}
	}
	for i, want := range []int{200, 429} {
		if r := do(t, "GET", base+"/oss", nil); r.status != want {
			t.Fatalf("oss %d: %d %s", i, r.status, r.body)
		}
	}
	if r := do(t, "GET", base+"/nowhere", nil); r.status != 404 {
		t.Fatalf("no route: %d", r.status)
	}
	if n := testutil.ToFloat64(m.denials.WithLabelValues("rate-limiting-advanced", "rm", "60")); n != 2 {
		t.Errorf("RLA denials by its 60 s window %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.denials.WithLabelValues("rate-limiting", "", "3600")); n != 1 {
		t.Errorf("rate-limiting denials by its hour %v, want 1", n)
	}
	if n := testutil.CollectAndCount(m.denials); n != 2 {
		t.Errorf("%d denial series, want 2", n)
	}
	for route, want := range map[string]uint64{"open": 1, "limited": 3, "oss": 2, "": 1} {
		if n := histCount(t, m, "sluice_http_request_duration_seconds", route); n != want {
			t.Errorf("request latency count of route %q: %d, want %d", route, n, want)
		}
	}
	if n := histCount(t, m, "sluice_upstream_duration_seconds", "limited"); n != 1 {
		t.Errorf("upstream latency count of limited: %d, want 1 (429s are not proxied)", n)
	}
}

// histCount returns the sample count of the histogram name of route.
func histCount(t *testing.T, m *Metrics, name, route string) uint64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.Metric {
			if label(s, "route") == route {
				return s.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// gauge returns the value of the gauge name of namespace ns, and whether
// it was exported.
func gauge(t *testing.T, m *Metrics, name, ns string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.Metric {
			if label(s, "namespace") == ns {
				return s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestSyncMetrics: a periodic namespace exports its sync interval, a lag
// below a few intervals while Redis answers, and an accuracy budget that
// follows its traffic; a synchronous namespace exports none of them.
func TestSyncMetrics(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	up := echoUpstream(t)
	g, base := startGateway(t, withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - name: periodic
        paths: [/periodic]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [100000], window_size: [60], identifier: ip, namespace: periodic, strategy: redis, sync_rate: 0.1,
                     redis: {host: 127.0.0.1, port: %[1]d}}
      - name: sync
        paths: [/sync]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [100000], window_size: [60], identifier: ip, namespace: sync, strategy: redis, sync_rate: 0,
                     redis: {host: 127.0.0.1, port: %[1]d}}
`, rs.Port()), up), Options{})
	m := g.Metrics()
	if v, ok := gauge(t, m, "sluice_redis_sync_interval_seconds", "periodic"); !ok || v != 0.1 {
		t.Errorf("interval %v %v, want 0.1", v, ok)
	}
	if _, ok := gauge(t, m, "sluice_redis_sync_lag_seconds", "sync"); ok {
		t.Error("a synchronous namespace exports a sync lag")
	}
	for range 20 {
		if r := do(t, "GET", base+"/periodic", nil); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// Cycles run every 100 ms: the lag falls below 1 s once one has run.
	deadline := time.Now().Add(15 * time.Second)
	for {
		lag, ok := gauge(t, m, "sluice_redis_sync_lag_seconds", "periodic")
		if ok && lag < 1 && g.Shared().Policy().SyncTimings()[0].LastSync.After(time.Time{}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync lag %v (%v) after 15 s", lag, ok)
		}
		<-time.After(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
	before := time.Now()
	budget, ok := gauge(t, m, "sluice_redis_sync_accuracy_budget", "periodic")
	st := g.Shared().Policy().SyncTimings()[0]
	// 20 decisions since the store opened, times 0.1 s.
	if want := 20 / before.Sub(st.Opened).Seconds() * 0.1; !ok || budget <= 0 || budget > want*1.01 {
		t.Errorf("budget %v (%v), want in (0, %v]", budget, ok, want)
	}
}

// TestStreamedBytes: a chunked upstream body, streamed to the client, is
// counted as sent, in the metric and the access log.
func TestStreamedBytes(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 3 {
			_, _ = w.Write([]byte("abcd"))
			w.(http.Flusher).Flush() // chunked: no Content-Length
		}
	}))
	t.Cleanup(up.Close)
	var logs syncBuffer
	g, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: svc, url: UPSTREAM, routes: [{name: stream, paths: [/]}]}]
`, up), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), AccessLog: true})
	if r := do(t, "GET", base+"/", nil); r.status != 200 || r.body != "abcdabcdabcd" {
		t.Fatalf("%d %q", r.status, r.body)
	}
	// The log phase of a streamed body runs once it is sent.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), `"msg":"access"`) {
		if time.Now().After(deadline) {
			t.Fatal("no access line")
		}
		<-time.After(10 * time.Millisecond) // poll interval, bounded by the deadline
	}
	if n := testutil.ToFloat64(g.Metrics().bytesOut.WithLabelValues("stream", "svc")); n != 12 {
		t.Errorf("response bytes %v, want 12", n)
	}
	if l := accessLines(t, logs.String())[0]; l["bytes_out"] != float64(12) {
		t.Errorf("bytes_out %v, want 12", l["bytes_out"])
	}
}
