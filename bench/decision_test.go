package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// decisionConfig is run-decision.sh's configuration: a counter per value of
// each key, a limit never reached.
const decisionConfig = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// TestDecisionHarness keeps bench/run-decision.sh working: it builds the
// three servers the script compares (envoyproxy/ratelimit from its module,
// sluice-decision, cmd/rlsbare), starts them as the script does, on one
// real redis-server, and runs a short fixed load of one and two descriptors
// per request against each. Every call must be answered OK with one status
// per descriptor, and the limiters must have counted in Redis: at least one
// command per counter, and no sluice decision on local counters. It times
// nothing.
func TestDecisionHarness(t *testing.T) {
	redisAddr := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	ctx := context.Background()

	dir := t.TempDir()
	bins := map[string][]string{ // name: directory, package
		"envoy-ratelimit": {"peers/envoyratelimit", "github.com/envoyproxy/ratelimit/src/service_cmd"},
		"sluice-decision": {"..", "./cmd/sluice-decision"},
		"rlsbare":         {".", "./cmd/rlsbare"},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var buildErrs []string
	for name, b := range bins {
		wg.Go(func() {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), b[1])
			cmd.Dir = b[0]
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				buildErrs = append(buildErrs, fmt.Sprintf("go build %s (in %s): %v\n%s", b[1], b[0], err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(buildErrs) > 0 {
		t.Fatal(strings.Join(buildErrs, "\n"))
	}

	rt := filepath.Join(dir, "runtime")
	if err := os.MkdirAll(filepath.Join(rt, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rt, "ratelimit", "config", "bench.yaml"), []byte(decisionConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	limiterEnv := []string{
		"REDIS_URL=" + redisAddr, "REDIS_SOCKET_TYPE=tcp", "REDIS_TIMEOUT=10s",
		"RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit",
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"GRPC_HOST=127.0.0.1", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
	}
	sluiceHTTP := freePort(t)
	servers := []struct {
		name    string
		limiter bool
		start   func(t *testing.T, grpcPort int) *exec.Cmd
	}{
		{"peer", true, func(t *testing.T, p int) *exec.Cmd {
			cmd := exec.Command(filepath.Join(dir, "envoy-ratelimit"))
			cmd.Env = append(os.Environ(), append(limiterEnv, portEnv(p, freePort(t), freePort(t))...)...)
			return cmd
		}},
		{"sluice", true, func(t *testing.T, p int) *exec.Cmd {
			cmd := exec.Command(filepath.Join(dir, "sluice-decision"))
			cmd.Env = append(os.Environ(), append(limiterEnv, portEnv(p, sluiceHTTP, freePort(t))...)...)
			return cmd
		}},
		{"bare", false, func(t *testing.T, p int) *exec.Cmd {
			return exec.Command(filepath.Join(dir, "rlsbare"), "-grpc", "127.0.0.1:"+strconv.Itoa(p))
		}},
	}
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			port := freePort(t)
			pid := startServer(t, s.start(t, port), "127.0.0.1:"+strconv.Itoa(port))
			for _, d := range []int{1, 2} {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				const calls = 400
				r, err := RLSLoad{
					Addr: "127.0.0.1:" + strconv.Itoa(port), Callers: 8, Conns: 2, Users: 100,
					Descriptors: d, Requests: calls, ServerPID: pid, Redis: rdb,
				}.Run(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !r.OK() || r.Decisions != calls || r.Calls != calls {
					t.Fatalf("%d descriptors: %d calls, %d decisions, %d failed, %d not OK (first: %s), coverage: %v; want %d OK",
						d, r.Calls, r.Decisions, r.Errors, r.Bad, r.FirstError, r.Coverage, calls)
				}
				if s.limiter && r.RedisCalls < calls*int64(d) {
					t.Errorf("%d descriptors: Redis ran %d commands for %d decisions; every counter needs one", d, r.RedisCalls, calls)
				}
				if r.ServerCPU < 0 {
					t.Errorf("server CPU time not measured")
				}
				if line := r.BenchLine("Decision/" + s.name); !strings.Contains(line, " decisions/s") {
					t.Errorf("BenchLine = %q", line)
				}
			}
			if s.name == "sluice" {
				checkNoFallback(t, sluiceHTTP)
			}
		})
	}
}

// checkNoFallback fails t when sluice-decision, serving HTTP on port,
// reports that its Redis store turned to local counters.
func checkNoFallback(t *testing.T, port int) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		// Both appear at the first change of state only: a store that
		// stayed connected has neither.
		if strings.HasPrefix(line, "sluice_redis_fallback{") && !strings.HasSuffix(line, " 0") ||
			strings.HasPrefix(line, "sluice_redis_state_changes_total{") && strings.Contains(line, `state="fallback"`) && !strings.HasSuffix(line, " 0") {
			t.Errorf("sluice-decision fell back to local counters: %s", line)
		}
	}
}

// portEnv is the peer's port variables.
func portEnv(grpcPort, httpPort, debugPort int) []string {
	return []string{"GRPC_PORT=" + strconv.Itoa(grpcPort), "PORT=" + strconv.Itoa(httpPort), "DEBUG_PORT=" + strconv.Itoa(debugPort)}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
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

// startServer starts cmd, waits until it answers ShouldRateLimit OK on
// addr, and returns its pid; it stops the process when t ends. It fails t,
// with the process's output, when the process exits or does not answer
// within 30 s.
func startServer(t *testing.T, cmd *exec.Cmd, addr string) int {
	t.Helper()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := WaitRLS(ctx, addr, "bench"); err != nil {
		t.Fatalf("%s: %v; its output:\n%s", filepath.Base(cmd.Path), err, out.String())
	}
	return cmd.Process.Pid
}
