package decision

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func writeTemp(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// health returns what gRPC health says for "ratelimit" and what
// /healthcheck answers.
func healthOf(t *testing.T, s *Service, hc healthpb.HealthClient) (healthpb.HealthCheckResponse_ServingStatus, int) {
	t.Helper()
	res, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthcheck", nil))
	return res.Status, rec.Code
}

// envoyproxy/ratelimit keeps running with a bad file and answers every
// request "no rate limit configuration loaded"; a later good file is
// applied, and a rejected one after it keeps the good one serving.
func TestStartInvalid(t *testing.T) {
	bad := "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"
	if _, err := OpenFile(writeTemp(t, bad), Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("OpenFile without StartInvalid: %v", err)
	}
	s, err := OpenFile(writeTemp(t, bad), newClock(t0).optsWith(Options{StartInvalid: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, conn := serveGRPC(t, s)
	hc := healthpb.NewHealthClient(conn)
	if st, code := healthOf(t, s, hc); st != healthpb.HealthCheckResponse_SERVING || code != 200 {
		t.Errorf("health without HealthyWithConfig: %v %d", st, code)
	}
	req := request("d", desc("k", "v"))
	_, err = c.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("no config: %v", err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no rate limit configuration loaded") {
		t.Errorf("/json without config: %d %s", rec.Code, rec.Body)
	}
	if st := s.Status(); st.Generation != 0 || st.ReloadErrors != 1 || !strings.Contains(st.LastReloadError, "fortnight") {
		t.Errorf("status: %+v", st)
	}

	if err := s.Reload([]byte(reloadV1)); err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{
		{"1", req, OK, codes_(OK), []uint32{2}, []uint32{3}},
		{"2", req, OK, codes_(OK), []uint32{1}, nil},
	})
	if err := s.Reload([]byte(bad)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad reload: %v", err)
	}
	runSteps(t, c, []step{
		{"3", req, OK, codes_(OK), []uint32{0}, nil},
		{"4", req, OVER, codes_(OVER), nil, nil},
	})
}

// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a configuration
// with a domain is loaded, and again when one without domains is; Drain
// (SIGTERM) makes it unhealthy for good.
func TestHealthyWithConfig(t *testing.T) {
	s, err := OpenFile(writeTemp(t, "domain: [not a string]\n"), Options{StartInvalid: true, HealthyWithConfig: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, conn := serveGRPC(t, s)
	hc := healthpb.NewHealthClient(conn)
	want := func(step string, st healthpb.HealthCheckResponse_ServingStatus, code int) {
		t.Helper()
		if gs, gc := healthOf(t, s, hc); gs != st || gc != code {
			t.Errorf("%s: health %v /healthcheck %d, want %v %d", step, gs, gc, st, code)
		}
	}
	want("bad file", healthpb.HealthCheckResponse_NOT_SERVING, 500)
	if err := s.Reload([]byte(reloadV1)); err != nil {
		t.Fatal(err)
	}
	want("good file", healthpb.HealthCheckResponse_SERVING, 200)
	if err := s.Reload([]byte("domains: []\n")); err != nil {
		t.Fatal(err)
	}
	want("no domains", healthpb.HealthCheckResponse_NOT_SERVING, 500)
	if err := s.Reload([]byte(reloadV1 + "\n")); err != nil {
		t.Fatal(err)
	}
	want("domains again", healthpb.HealthCheckResponse_SERVING, 200)
	s.Drain()
	want("draining", healthpb.HealthCheckResponse_NOT_SERVING, 500)
}

// The store of a service started without a configuration is opened by the
// first good one; a later one selecting another store is rejected.
func TestStartInvalidOpensStoreLater(t *testing.T) {
	s, err := Open(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Reload([]byte("store: {type: memory, memory: {max_keys: 10}}\n" + reloadV1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload([]byte(reloadV1)); !errors.Is(err, ErrStoreChanged) {
		t.Fatalf("store changed: %v", err)
	}
}
