package decision

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	s := newService(t, envoyConfig, newClock(t0).opts())
	c, _ := serveGRPC(t, s)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, r := range []struct {
		domain string
		kv     []string
	}{
		{"edge", []string{"remote_address", "1"}}, {"edge", []string{"remote_address", "10.0.0.1"}},
		{"edge", []string{"remote_address", "10.6.6.6"}}, {"edge", []string{"nope", "x"}},
		{"edge", []string{"watched", "x"}}, {"edge", []string{"watched", "x"}},
		{"elsewhere", []string{"remote_address", "1"}}, {"other", []string{"a", "b"}},
	} {
		call(t, c, request(r.domain, desc(r.kv...)))
	}
	_, _ = c.ShouldRateLimit(context.Background(), request(""))
	post(t, srv.URL+"/v1/decide", `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "1"}]}]}`)
	_ = s.Reload([]byte("domain: [")) // rejected
	_ = s.Reload([]byte(reloadV1))    // applied

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`sluice_decision_descriptors_total{domain="edge",outcome="ok"} 3`,
		`sluice_decision_descriptors_total{domain="edge",outcome="unlimited"} 1`,
		`sluice_decision_descriptors_total{domain="edge",outcome="over_limit"} 1`,
		`sluice_decision_descriptors_total{domain="edge",outcome="no_limit"} 1`,
		`sluice_decision_descriptors_total{domain="edge",outcome="shadow_over_limit"} 1`,
		`sluice_decision_descriptors_total{domain="(unknown)",outcome="no_limit"} 2`,
		`sluice_decision_requests_total{result="ok",transport="grpc"} 7`,
		`sluice_decision_requests_total{result="over_limit",transport="grpc"} 1`,
		`sluice_decision_requests_total{result="invalid",transport="grpc"} 1`,
		`sluice_decision_requests_total{result="ok",transport="http"} 1`,
		`sluice_decision_duration_seconds_count{transport="grpc"} 9`,
		`sluice_decision_config_reloads_total{result="applied"} 1`,
		`sluice_decision_config_reloads_total{result="rejected"} 1`,
		`sluice_decision_config_generation 2`,
		`sluice_decision_store_errors_total 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Metrics go to the registry given, and a second service on it clashes.
	reg := prometheus.NewRegistry()
	_ = newService(t, reloadV1, Options{Registry: reg})
	if _, err := New(mustParse(t, reloadV1), nil, Options{Registry: reg}); err == nil {
		t.Error("two services on one registry: no error")
	}
}
