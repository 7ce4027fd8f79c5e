package decision

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthNames: the probes written for envoyproxy/ratelimit work
// unchanged: gRPC health for "" and "ratelimit", HTTP GET /healthcheck.
func TestHealthNames(t *testing.T) {
	svc := newService(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n", Options{})
	_, conn := serveGRPC(t, svc)
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		res, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", name, res, err)
		}
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "OK" {
		t.Errorf("/healthcheck: %d %q", res.StatusCode, b)
	}
}
