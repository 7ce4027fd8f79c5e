package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func (s *service) client(t *testing.T) (rlspb.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

func (s *service) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(s.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func decideOnce(ctx context.Context, c rlspb.RateLimitServiceClient, domain string, kv ...string) (rlspb.RateLimitResponse_Code, error) {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{d}})
	if err != nil {
		return 0, err
	}
	return resp.OverallCode, nil
}

// waitFor polls cond until it holds, within a bounded deadline.
func waitFor(t *testing.T, s *service, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s\n%s", what, s.stderr)
		}
		<-time.After(10 * time.Millisecond) // spaces the polls; not a wait for an event
	}
}

// A bad file at start does not stop the service: it answers "no rate
// limit configuration loaded" and is unhealthy with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED until the file is fixed.
func TestStartWithBadConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, "domain: d\ndescriptors: [{key: k, colour: red}]\n")
	s := startWith(t, []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	rls, hc := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := decideOnce(ctx, rls, "d", "k", "v"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("bad config at start: %v", err)
	}
	if res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health: %v %v", res, err)
	}
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck: %d", code)
	}
	// The log line is written by another goroutine than the listening line.
	waitFor(t, s, "the error logged", func() bool { return strings.Contains(s.stderr.String(), "colour: unknown field") })

	writeFile(t, cfg, config)
	waitFor(t, s, "the fixed file is applied", func() bool { code, _ := s.get(t, "/healthcheck"); return code == 200 })
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if c, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil || c != want {
			t.Fatalf("call %d: %v %v, want %v", i+1, c, err, want)
		}
	}
}

// envoyproxy/ratelimit's layout: no -c, files in
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, the root a symlink swapped to
// a new version, a domain split over two files with MERGE_DOMAIN_CONFIG.
func TestRuntimeDirectory(t *testing.T) {
	base := t.TempDir()
	version := func(name string, files map[string]string) {
		dir := filepath.Join(base, name, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, data := range files {
			writeFile(t, filepath.Join(dir, f), data)
		}
	}
	link := func(name string) {
		tmp := filepath.Join(base, "current.tmp")
		if err := os.Symlink(filepath.Join(base, name), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(base, "current")); err != nil {
			t.Fatal(err)
		}
	}
	version("v1", map[string]string{
		"a.yaml":      "domain: d\ndescriptors: [{key: a, rate_limit: {unit: hour, requests_per_unit: 1}}]\n",
		"b.yaml":      "domain: d\ndescriptors: [{key: b, rate_limit: {unit: hour, requests_per_unit: 1}}]\n",
		".hidden.yml": "not: [yaml",
	})
	link("v1")
	env := []string{"RUNTIME_ROOT=" + filepath.Join(base, "current"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
		"MERGE_DOMAIN_CONFIG=true", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"}
	s := startWith(t, env)
	rls, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, k := range []string{"a", "b"} {
		if c, err := decideOnce(ctx, rls, "d", k, "x"); err != nil || c != rlspb.RateLimitResponse_OK {
			t.Fatalf("%s first: %v %v", k, c, err)
		}
		if c, err := decideOnce(ctx, rls, "d", k, "x"); err != nil || c != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s second: %v %v", k, c, err)
		}
	}
	version("v2", map[string]string{"a.yaml": "domain: d\ndescriptors: [{key: a, rate_limit: {unit: hour, requests_per_unit: 5}}]\n"})
	link("v2")
	s.waitGeneration(t, 2)
	if c, err := decideOnce(ctx, rls, "d", "a", "x"); err != nil || c != rlspb.RateLimitResponse_OK {
		t.Fatalf("a after the swap: %v %v", c, err)
	}
	if c, err := decideOnce(ctx, rls, "d", "b", "x"); err != nil || c != rlspb.RateLimitResponse_OK {
		t.Fatalf("b is no longer limited: %v %v", c, err)
	}

	// Without MERGE_DOMAIN_CONFIG the split domain is an error naming both files.
	out, err := command(t, "-check", "-runtime-root", filepath.Join(base, "v1"), "-runtime-subdirectory", "ratelimit", "-runtime-ignore-dotfiles").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), `b.yaml: domain: duplicate domain "d", also in a.yaml (set MERGE_DOMAIN_CONFIG to merge them)`) {
		t.Errorf("-check of a split domain: %v\n%s", err, out)
	}
}

// A variable of the peer that sluice does not implement stops the start
// with its name; one that only tunes the peer is a warning.
func TestUnsupportedEnv(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	for env, want := range map[string]string{
		"BACKEND_TYPE=memcache":         `BACKEND_TYPE="memcache" is not supported`,
		"CONFIG_TYPE=GRPC_XDS_SOTW":     `CONFIG_TYPE="GRPC_XDS_SOTW" is not supported`,
		"REDIS_URL=/var/run/redis.sock": `REDIS_SOCKET_TYPE="" is not supported: sluice reaches Redis over tcp only`,
		"REDIS_PERSECOND=true":          `REDIS_PERSECOND="true" is not supported: sluice uses one Redis for every limit`,
		"EXTRA_TAGS=a:b":                "-statsd-tags (EXTRA_TAGS) needs -dogstatsd (USE_DOG_STATSD)",
		"GRPC_SERVER_USE_TLS=true":      "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
	} {
		cmd := command(t, "-c", cfg, "-check")
		cmd.Env = append(cmd.Env, env)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v\n%s", env, err, out)
		}
	}
	cmd := command(t, "-c", cfg, "-check")
	cmd.Env = append(cmd.Env, "REDIS_POOL_SIZE=50", "LOG_LEVEL=WARNING")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `REDIS_POOL_SIZE=\"50\" is not supported`) {
		t.Errorf("REDIS_POOL_SIZE: %v\n%s", err, out)
	}
	// REDIS_PERSECOND_URL is read only with REDIS_PERSECOND on, as in the
	// peer: beside REDIS_PERSECOND=false it changes nothing.
	cmd = command(t, "-c", cfg, "-check")
	cmd.Env = append(cmd.Env, "REDIS_PERSECOND=false", "REDIS_PERSECOND_URL=127.0.0.1:1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("REDIS_PERSECOND_URL with REDIS_PERSECOND=false: %v\n%s", err, out)
	}
}

// A rejected environment or file with a secret in it names the variable
// or field and never prints the secret.
func TestRejectedConfigHidesSecrets(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, `store:
  type: redis
  redis:
    host: 127.0.0.1
    password: 918273645
    cluster_nodes: ["redis://:file-url-pw@127.0.0.1:6379"]
`+config)
	badHost := filepath.Join(t.TempDir(), "bad-host.yaml")
	writeFile(t, badHost, `store:
  type: redis
  redis:
    host: "user:file-host-pw@redis.example"
    port: 6379
    sentinel_master: m
    sentinel_nodes: ["sentinel-node-pw@127.0.0.1:26379"]
`+config)
	for _, c := range []struct {
		file   string
		env    []string
		want   []string
		secret []string
	}{
		{cfg, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis://:env-url-pw@127.0.0.1:6379"},
			[]string{"REDIS_URL: user info (user:password@) is not supported"}, []string{"env-url-pw"}},
		{cfg, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379", "REDIS_AUTH=env-auth-pw", "REDIS_TYPE=bogus"},
			[]string{`REDIS_TYPE="bogus"`}, []string{"env-auth-pw"}},
		{cfg, []string{"MEMCACHE_HOST_PORT=http://u:memcache-pw@127.0.0.1:11211"},
			[]string{`MEMCACHE_HOST_PORT="http://xxxxx@127.0.0.1:11211" is not supported`}, []string{"memcache-pw"}},
		{bad, nil,
			[]string{"store.redis.password: expected a string", `store.redis.cluster_nodes[0]: expected "host:port", got "redis://xxxxx@127.0.0.1:6379"`},
			[]string{"918273645", "file-url-pw"}},
		{badHost, nil,
			[]string{"store.redis.host: invalid value: a host must not carry a user name or password", "store.redis.sentinel_nodes[0]: host: invalid value"},
			[]string{"file-host-pw", "sentinel-node-pw"}},
		{cfg, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.example:6379,bad host:6379", "REDIS_TYPE=cluster"},
			[]string{`REDIS_URL="redis.example:6379,bad host:6379": "bad host:6379": host: invalid value`}, nil},
	} {
		cmd := command(t, "-c", c.file, "-check")
		cmd.Env = append(cmd.Env, c.env...)
		out, _ := cmd.CombinedOutput()
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v %s: want %q in\n%s", c.env, c.file, w, out)
			}
		}
		for _, s := range c.secret {
			if strings.Contains(string(out), s) {
				t.Errorf("%v %s: the output carries the secret %q:\n%s", c.env, c.file, s, out)
			}
		}
	}
}

// An empty config directory is a configuration without domains, as
// envoyproxy/ratelimit reads it: every request is answered OK, and with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED the service is unhealthy until a
// file gives a domain, and again once every file is gone.
func TestEmptyRuntimeDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"}
	s := startWith(t, env)
	rls, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil || c != rlspb.RateLimitResponse_OK {
		t.Fatalf("empty directory: %v %v, want OK", c, err)
	}
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck without a domain: %d, want 500", code)
	}
	f := filepath.Join(dir, "d.yaml")
	writeFile(t, f, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")
	waitFor(t, s, "the file is applied", func() bool { code, _ := s.get(t, "/healthcheck"); return code == 200 })
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if c, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil || c != want {
			t.Fatalf("call %d: %v %v, want %v", i+1, c, err, want)
		}
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "the empty directory is applied", func() bool { code, _ := s.get(t, "/healthcheck"); return code == 500 })
	if c, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil || c != rlspb.RateLimitResponse_OK {
		t.Fatalf("every file gone: %v %v, want OK", c, err)
	}
}
