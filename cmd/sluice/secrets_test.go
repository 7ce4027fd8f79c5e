package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// A configuration with a password in a Redis host is refused by run and
// validate, naming the field; the password is printed nowhere.
func TestRejectedRedisHostHidesSecret(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte(`_format_version: "3.0"
plugins:
- name: rate-limiting-advanced
  config: {limit: [5], window_size: [60], strategy: redis, sync_rate: 0,
    redis: {host: "user:gw-host-pw@redis.example", port: 6379}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "-c", bad, "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, {"validate", bad}} {
		out, err := command(t, args...).CombinedOutput()
		if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), "plugins[0].config.redis.host: invalid value") {
			t.Errorf("%s: %v, want an error naming plugins[0].config.redis.host:\n%s", args[0], err, out)
		}
		if strings.Contains(string(out), "gw-host-pw") {
			t.Errorf("%s prints the password:\n%s", args[0], out)
		}
	}
}

// A wrong Redis password against a real redis-server with requirepass:
// requests are decided locally, the log names config.redis.password, and
// neither the Redis password nor the admin token nor a key-auth key
// reaches stdout, stderr, an admin answer or /metrics.
func TestRedisWrongPasswordHidesSecrets(t *testing.T) {
	const (
		rightPW = "gw-redis-right-pw"
		wrongPW = "gw-redis-wrong-pw"
		token   = "gw-admin-tok-s3cret"
		apiKey  = "gw-api-key-s3cret"
	)
	srv := testservers.Redis(t, testservers.RedisOptions{Password: rightPW})
	cfg := filepath.Join(t.TempDir(), "kong.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  url: http://127.0.0.1:9
  routes:
  - name: r
    paths: [/r]
    plugins:
    - name: key-auth
    - name: request-termination
      config: {status_code: 200, message: ok}
    - name: rate-limiting-advanced
      config: {limit: [100], window_size: [60], identifier: consumer, namespace: pw, strategy: redis, sync_rate: 0,
        redis: {host: 127.0.0.1, port: %d, password: %q}}
consumers:
- username: alice
  keyauth_credentials: [{key: %q}]
`, srv.Port(), wrongPW, apiKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, "run", "-c", cfg, "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--admin-token", token)
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr, stdout lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	addrs := make(chan [2]string, 1)
	go func() {
		var a [2]string
		sc := bufio.NewScanner(io.TeeReader(stdoutPipe, &stdout))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "proxy listening on "); ok {
				a[0] = strings.Fields(v)[0]
			}
			if v, ok := strings.CutPrefix(sc.Text(), "admin listening on "); ok {
				a[1] = v
				addrs <- a
			}
		}
		_, _ = io.Copy(&stdout, stdoutPipe)
	}()
	var proxy, admin string
	select {
	case a := <-addrs:
		proxy, admin = "http://"+a[0], "http://"+a[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not come up\n%s", stderr.String())
	}
	do := func(method, url string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for i := range 3 {
		if code, body := do("GET", proxy+"/r?apikey="+apiKey); code != 200 {
			t.Fatalf("request %d: %d %s, want 200 from local counters\n%s", i, code, body, stderr.String())
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "config.redis.password") {
		if time.Now().After(deadline) {
			t.Fatalf("no log naming config.redis.password:\n%s", stderr.String())
		}
		pollPause()
	}
	captured := []string{}
	for _, path := range []string{"/", "/status", "/metrics", "/config", "/config/reloads", "/rate-limiting/plugins",
		"/rate-limiting/top", "/rate-limiting/plugins/pw/counters/alice", "/dashboard/data"} {
		code, body := do("GET", admin+path, "Kong-Admin-Token", token)
		if code >= 500 && !strings.Contains(path, "counters") {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
		captured = append(captured, path+": "+body)
	}
	if !strings.Contains(strings.Join(captured, "\n"), "wrongpass") {
		t.Errorf("no admin answer names the reason wrongpass:\n%s", strings.Join(captured, "\n"))
	}
	_ = cmd.Process.Kill()
	<-done
	done <- nil // for the cleanup
	captured = append(captured, stderr.String(), stdout.String())
	all := strings.Join(captured, "\n")
	for _, secret := range []string{rightPW, wrongPW, token, apiKey} {
		if strings.Contains(all, secret) {
			i := strings.Index(all, secret)
			t.Errorf("%q reached stdout, stderr, an admin answer or /metrics: ...%s...", secret, all[max(0, i-300):min(len(all), i+100)])
		}
	}
}

// --lua-ssl-trusted-certificate (Kong's lua_ssl_trusted_certificate) gives
// Redis TLS connections the CA of a private PKI: with ssl_verify, counting
// is shared in Redis, not per node; a file that is not PEM is refused at
// start, naming the flag.
func TestRedisTrustedCertificate(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{TLS: true})
	cfg := filepath.Join(t.TempDir(), "kong.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  url: http://127.0.0.1:9
  routes:
  - name: r
    paths: [/r]
    plugins:
    - name: request-termination
      config: {status_code: 200, message: ok}
    - name: rate-limiting-advanced
      config: {limit: [100], window_size: [60], namespace: tls, strategy: redis, sync_rate: 0,
        redis: {host: 127.0.0.1, port: %d, ssl: true, ssl_verify: true, server_name: localhost}}
`, srv.Port())), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, "-c", cfg, "--lua-ssl-trusted-certificate", srv.CAFile)
	if res := get(t, s.proxy+"/r"); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if n, _ := srv.Do(t, "DBSIZE").(int64); n == 0 {
		t.Errorf("no key in Redis: the counter was not shared")
	}
	s.stop(t)

	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := command(t, "run", "-c", cfg, "--proxy-listen", "127.0.0.1:0", "--lua-ssl-trusted-certificate", notPEM).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--lua-ssl-trusted-certificate") {
		t.Errorf("a file that is not PEM: %v\n%s", err, out)
	}
}
