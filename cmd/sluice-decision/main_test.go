package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The tests run the real binary: the test binary re-executes itself with
// SLUICE_DECISION_TEST_MAIN set and then behaves as main.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_DECISION_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(hermeticEnv(), "SLUICE_DECISION_TEST_MAIN=1")
	return cmd
}

// hermeticEnv is the test's environment without the envoyproxy/ratelimit
// variables the binary reads, so a machine's own PORT or LOG_LEVEL cannot
// change what a test runs.
func hermeticEnv() []string {
	read := map[string]bool{"HOST": true, "PORT": true, "GRPC_HOST": true, "GRPC_PORT": true, "GRPC_UDS": true, "DEBUG_HOST": true,
		"DEBUG_PORT": true, "LOG_LEVEL": true, "BACKEND_TYPE": true, "DISABLE_STATS": true, "USE_STATSD": true, "STATSD_HOST": true,
		"STATSD_PORT": true, "CACHE_KEY_PREFIX": true, "USE_DOG_STATSD_MOGRIFIERS": true}
	for _, e := range envFlags {
		read[e.env] = true
	}
	for _, u := range unsupportedEnv {
		read[u.env] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !read[name] && !strings.HasPrefix(name, "REDIS_") && !strings.HasPrefix(name, "RUNTIME_") && !strings.HasPrefix(name, "GRPC_") && !strings.HasPrefix(name, "DOG_STATSD_MOGRIFIER_") {
			out = append(out, kv)
		}
	}
	return out
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	// Write then rename, as editors and ConfigMaps do, so the watcher never
	// reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const config = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
`

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, config)
	for _, f := range []string{good, "../../examples/decision/config.yaml"} {
		out, err := command(t, "-c", f, "-check").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "configuration is valid") {
			t.Fatalf("%s: %s %v", f, out, err)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hours, requests_per_unit: 2}\n  - value: v\n")
	cmd := command(t, "-c", bad, "-check")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("bad: exit %v, want 1", err)
	}
	for _, want := range []string{`line 4: descriptors[0].rate_limit.unit: invalid unit "hours"`, "line 5: descriptors[1].key: must not be empty"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stderr.String())
		}
	}
	cmd = command(t)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Error("no -c: exit 0")
	}
}

// service is a running sluice-decision.
type service struct {
	cmd        *exec.Cmd
	grpc, http string
	debug      string // "http://host:port" when the debug port is on
	done       chan error
	stderr     *syncBuffer
	stdout     *syncBuffer
}

// syncBuffer is a bytes.Buffer the test may read while the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func start(t *testing.T, cfg string) *service {
	t.Helper()
	return startWith(t, nil, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
}

// startWith runs the binary with args and env added to the test's
// environment, and waits until it listens.
func startWith(t *testing.T, env []string, args ...string) *service {
	t.Helper()
	cmd := command(t, args...)
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &service{cmd: cmd, done: make(chan error, 1), stderr: &syncBuffer{}, stdout: &syncBuffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [3]string, 1)
	go func() {
		var a [3]string
		sc := bufio.NewScanner(io.TeeReader(stdout, s.stdout))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "grpc listening on "); ok {
				a[0] = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "debug listening on "); ok {
				a[2] = "http://" + v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "http listening on "); ok {
				a[1] = v
				addrs <- a
			}
		}
		_, _ = io.Copy(s.stdout, stdout)
	}()
	go func() { s.done <- cmd.Wait() }()
	select {
	case a := <-addrs:
		s.grpc, s.http, s.debug = a[0], "http://"+a[1], a[2]
	case err := <-s.done:
		t.Fatalf("sluice-decision exited: %v\n%s", err, s.stderr)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("sluice-decision did not start\n%s", s.stderr)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *service) generation(t *testing.T) uint64 {
	t.Helper()
	resp, err := http.Get(s.http + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Generation uint64 `json:"generation"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Generation
}

// waitGeneration polls /status until the generation reaches n, within a
// bounded deadline.
func (s *service) waitGeneration(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.generation(t) < n {
		if time.Now().After(deadline) {
			t.Fatalf("generation %d not reached\n%s", n, s.stderr)
		}
		<-time.After(10 * time.Millisecond) // spaces the polls; not a wait for an event
	}
}

func TestServeReloadShutdown(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := start(t, cfg)

	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	rls := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	decide := func() rlspb.RateLimitResponse_Code {
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if c := decide(); c != rlspb.RateLimitResponse_OK {
		t.Fatalf("first: %s", c)
	}
	// The HTTP endpoint shares the counters.
	hr, err := http.Post(s.http+"/v1/decide", "application/json",
		strings.NewReader(`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Fatalf("http: %d", hr.StatusCode)
	}
	if c := decide(); c != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third: %s", c)
	}

	// A changed file is picked up by the watcher; counters survive.
	writeFile(t, cfg, strings.Replace(config, "requests_per_unit: 2", "requests_per_unit: 3", 1))
	s.waitGeneration(t, 2)
	if c := decide(); c != rlspb.RateLimitResponse_OK {
		t.Fatalf("after reload to 3: %s", c)
	}
	if c := decide(); c != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after reload, 5th call: %s", c)
	}
	// A broken file is rejected; the service keeps answering.
	writeFile(t, cfg, "domain: d\ndescriptors: [{key: k, colour: red}]\n")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.stderr.String(), "colour: unknown field") {
		if time.Now().After(deadline) {
			t.Fatalf("rejection not logged:\n%s", s.stderr)
		}
		<-time.After(10 * time.Millisecond) // spaces the polls
	}
	if c := decide(); c != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a rejected reload: %s", c)
	}
	// SIGHUP reloads too.
	writeFile(t, cfg, strings.Replace(config, "requests_per_unit: 2", "requests_per_unit: 10", 1))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitGeneration(t, 3)
	mr, err := http.Get(s.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	for _, want := range []string{"sluice_decision_config_generation 3\n", `sluice_decision_config_reloads_total{result="rejected"} 1`, "go_goroutines "} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", s.stderr)
	}
}

func TestStartFailures(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	// A Redis that is down is no start failure (the store connects on its
	// first call and counts locally meanwhile); a config the Redis client
	// cannot use is.
	writeFile(t, cfg, "store: {type: redis, redis: {cluster_nodes: [\"127.0.0.1:1\"], database: 1}}\n"+config)
	cmd := command(t, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "opening the redis store") {
		t.Errorf("unusable redis config: %v\n%s", err, out)
	}
	out, err = command(t, "-c", filepath.Join(dir, "missing.yaml")).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "reading config") {
		t.Errorf("missing file: %v\n%s", err, out)
	}
}
