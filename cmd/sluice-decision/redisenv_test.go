package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// envoyproxy/ratelimit's REDIS_TYPE sentinel and cluster, with REDIS_URL in
// the peer's forms (master-name,host:port,... and host:port,...), against a
// real redis-sentinel group and a real Redis Cluster: two processes count
// together, in sluice's keys and in the peer's.
func TestRedisSentinelAndClusterFromEnv(t *testing.T) {
	sg := testservers.Sentinel(t)
	cl := testservers.Cluster(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"sentinel", []string{"REDIS_TYPE=sentinel", "REDIS_URL=" + sg.MasterName + "," + strings.Join(sg.Addrs(), ",")}},
		{"cluster", []string{"REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(cl.Addrs(), ",")}},
	} {
		for _, layout := range []string{"sluice", "envoy"} {
			t.Run(tc.name+"/"+layout, func(t *testing.T) {
				env := append([]string{"REDIS_SOCKET_TYPE=tcp"}, tc.env...)
				args := []string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}
				if layout == "envoy" {
					env = append(env, "CACHE_KEY_PREFIX=t_")
					args = append(args, "-envoy-key-layout")
				}
				countsAcrossTwo(t, env, args, tc.name+layout)
			})
		}
	}
}

// countsAcrossTwo starts two processes with env and args on config and
// checks that the limit of 2 is shared: the third call, on either, is over.
func countsAcrossTwo(t *testing.T, env, args []string, value string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	args = append([]string{"-c", cfg}, args...)
	a := startWith(t, env, args...)
	b := startWith(t, env, args...)
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, c := range []rlspb.RateLimitServiceClient{ca, cb, ca, cb} {
		want := rlspb.RateLimitResponse_OK
		if i >= 2 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if got, err := decideOnce(ctx, c, "d", "k", value); err != nil || got != want {
			t.Fatalf("call %d: %v %v, want %v\n%s\n%s", i+1, got, err, want, a.stderr, b.stderr)
		}
	}
	if code, body := a.get(t, "/status"); code != 200 || !strings.Contains(body, `"store":"redis"`) {
		t.Errorf("/status: %s", body)
	}
}

// REDIS_AUTH: with the right password two processes count together; with
// a wrong one the service logs an error naming REDIS_AUTH (never the
// password) and decides with local counters.
func TestRedisAuthFromEnv(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{Password: "s3cret-right"})
	url := "REDIS_URL=" + r.Addr()
	t.Run("right", func(t *testing.T) {
		countsAcrossTwo(t, []string{"REDIS_SOCKET_TYPE=tcp", url, "REDIS_AUTH=s3cret-right"},
			[]string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, "auth")
	})
	t.Run("wrong", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		writeFile(t, cfg, config)
		s := startWith(t, []string{"REDIS_SOCKET_TYPE=tcp", url, "REDIS_AUTH=s3cret-wrong"},
			"-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-debug", "127.0.0.1:0", "-admin-token", "s3cret-tok")
		c, _ := s.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if got, err := decideOnce(ctx, c, "d", "k", "wrong"); err != nil || got != rlspb.RateLimitResponse_OK {
			t.Fatalf("call: %v %v, want OK from local counters", got, err)
		}
		waitFor(t, s, "an error naming REDIS_AUTH", func() bool {
			return strings.Contains(s.stderr.String(), "setting=REDIS_AUTH")
		})
		if out := s.stderr.String(); !strings.Contains(out, "reason=wrongpass") || !strings.Contains(out, "level=ERROR") {
			t.Errorf("log misses the reason or level:\n%s", out)
		}
		// Every answer of the HTTP and debug ports, the logs and stdout:
		// neither password nor admin token (both contain "s3cret").
		captured := []string{s.stderr.String()}
		for _, u := range []string{s.http + "/status", s.http + "/metrics", s.http + "/healthcheck",
			s.http + "/rate-limiting/top", s.http + "/rate-limiting/counters?domain=d&key=k&value=wrong",
			s.debug + "/", s.debug + "/rlconfig", s.debug + "/stats", s.debug + "/debug/pprof/cmdline"} {
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("Kong-Admin-Token", "s3cret-tok")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode >= 500 && !strings.HasSuffix(u, "/healthcheck") && !strings.Contains(u, "counters") {
				t.Errorf("GET %s: %d %s", u, res.StatusCode, b)
			}
			captured = append(captured, u+": "+string(b))
		}
		if !strings.Contains(captured[len(captured)-1], "-admin-token\x00xxxxx") {
			t.Errorf("the debug port's cmdline does not show the token redacted: %q", captured[len(captured)-1])
		}
		logs := s.stop(t)
		captured = append(captured, logs, s.stdout.String())
		if all := strings.Join(captured, "\n"); strings.Contains(all, "s3cret") {
			t.Errorf("a password or the token reached a log, stdout or an answer:\n%s", all)
		}
	})
}
