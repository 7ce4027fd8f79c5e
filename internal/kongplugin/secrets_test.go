package kongplugin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// pluginServer is a real sluice-rate-limiting plugin server process.
type pluginServer struct {
	sock    string
	inspect string // "http://host:port" of its inspect listener
	mu      sync.Mutex
	stderr  strings.Builder
	done    chan error
}

func (s *pluginServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.Write(p)
}

func (s *pluginServer) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// buildPlugin builds cmd/name into a temporary directory.
func buildPlugin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}

// startPluginServer runs bin as Kong does, with args added, and waits for
// its inspect listener to open.
func startPluginServer(t *testing.T, bin string, args ...string) *pluginServer {
	t.Helper()
	prefix, err := os.MkdirTemp("", "kong") // short: a Unix socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(prefix) })
	cmd := exec.Command(bin, append([]string{"-kong-prefix", prefix}, args...)...)
	s := &pluginServer{sock: filepath.Join(prefix, filepath.Base(bin)+".socket"), done: make(chan error, 1)}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(s, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "kongplugin: inspect listening addr="); ok {
				addr <- strings.Fields(a)[0]
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("plugin server exited before listening:\n%s", s.logs())
		}
		_, port, _ := net.SplitHostPort(a)
		s.inspect = "http://127.0.0.1:" + port
	case <-time.After(30 * time.Second):
		t.Fatalf("no inspect listener:\n%s", s.logs())
	}
	return s
}

// dial connects to the plugin server's socket as Kong does; the socket is
// created after the inspect listener opens, so this polls, bounded.
func (s *pluginServer) dial(t *testing.T) net.Conn {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.Dial("unix", s.sock)
		if err == nil {
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin server socket %s not ready: %v\n%s", s.sock, err, s.logs())
		}
		time.Sleep(20 * time.Millisecond) // readiness poll, bounded above
	}
}

// call makes one inspect call with the token (none when ""), and returns
// the status and body.
func (s *pluginServer) call(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.inspect+path, nil)
	if token != "" {
		req.Header.Set(adminauth.TokenHeader, token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestPluginServerHidesSecrets runs the real plugin server with its
// inspect listener on a wildcard address and a token: the listener
// answers 401 without the token and 200 with it; a wrong
// config.redis.password against a real Redis is logged through kong.log
// naming the setting, and a password put in config.redis.host is refused
// naming the field. No password and not the token reach kong.log, the
// server's own log or the inspect answers.
func TestPluginServerHidesSecrets(t *testing.T) {
	const (
		token    = "inspect-tok-s3cret"
		rightPW  = "kong-redis-right-pw"
		wrongPW  = "kong-redis-wrong-pw"
		hostPW   = "kong-host-pw"
		redisUsr = "kong-redis-user"
	)
	srv := testservers.Redis(t, testservers.RedisOptions{Password: rightPW})
	bin := buildPlugin(t, "sluice-rate-limiting")

	// Without a token, a wildcard address is refused at start.
	out, err := exec.Command(bin, "-kong-prefix", t.TempDir(), "-inspect-listen", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is reachable from other machines: set -admin-token-file") {
		t.Fatalf("wildcard inspect listener without a token: %v\n%s", err, out)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startPluginServer(t, bin, "-inspect-listen", "0.0.0.0:0", "-admin-token-file", tokenFile)

	var captured []string
	wrong := fmt.Sprintf(`{"limit": [100], "window_size": [60], "namespace": "pw", "strategy": "redis", "sync_rate": 0,
		"redis": {"host": "127.0.0.1", "port": %d, "username": null, "password": %q, "timeout": 500}, "__plugin_id": "p-pw"}`, srv.Port(), wrongPW)
	id, err := kongtest.StartInstance(s.dial(t), 1, "sluice-rate-limiting", []byte(wrong))
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for i := range 3 {
		k := kongtest.New(t, kongtest.Request{ForwardedIP: "192.0.2.1"})
		if _, err := k.HandleEvent(s.dial(t), int64(2+i), id, "access"); err != nil {
			t.Fatal(err)
		}
		if e := k.Exit(); e != nil {
			t.Fatalf("request %d with a wrong password: exit %+v, want a local decision", i, e)
		}
		logs = append(logs, k.Logs()...)
	}
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "err: ") || !strings.Contains(logs[0], "check config.redis.password") {
		t.Errorf("kong.log lines %q, want one error naming config.redis.password", logs)
	}
	captured = append(captured, logs...)

	bad := fmt.Sprintf(`{"limit": [100], "window_size": [60], "namespace": "host", "strategy": "redis", "sync_rate": 0,
		"redis": {"host": "%s:%s@redis.example", "port": %d}}`, redisUsr, hostPW, srv.Port())
	id, err = kongtest.StartInstance(s.dial(t), 10, "sluice-rate-limiting", []byte(bad))
	if err == nil {
		k := kongtest.New(t, kongtest.Request{ForwardedIP: "192.0.2.1"})
		_, err = k.HandleEvent(s.dial(t), 11, id, "access")
		captured = append(captured, k.Logs()...)
		if e := k.Exit(); e == nil || e.Status != 500 {
			t.Errorf("a config with a password in redis.host: exit %+v, want 500", e)
		}
		if !strings.Contains(strings.Join(k.Logs(), "\n"), "config.redis.host: invalid value") {
			t.Errorf("kong.log lines %q do not name config.redis.host", k.Logs())
		}
	}
	if err != nil {
		captured = append(captured, err.Error())
		if !strings.Contains(err.Error(), "config.redis.host: invalid value") {
			t.Errorf("the error %q does not name config.redis.host", err)
		}
	}

	for _, path := range []string{"/rate-limiting/plugins", "/rate-limiting/top", "/rate-limiting/plugins/p-pw/counters/192.0.2.1"} {
		if code, body := s.call(t, "GET", path, ""); code != http.StatusUnauthorized || !strings.Contains(body, adminauth.UnauthorizedMessage) {
			t.Errorf("GET %s without the token: %d %s, want 401", path, code, body)
		}
		if code, body := s.call(t, "GET", path, "wrong-"+token); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d %s, want 401", path, code, body)
		}
		code, body := s.call(t, "GET", path, token)
		if code != http.StatusOK {
			t.Errorf("GET %s with the token: %d %s, want 200", path, code, body)
		}
		captured = append(captured, body)
	}
	var list struct {
		Data []InspectedPlugin `json:"data"`
	}
	_, body := s.call(t, "GET", "/rate-limiting/plugins", token)
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Data) == 0 || list.Data[0].Store.Reason != "wrongpass" {
		t.Errorf("plugins: %v %s, want the wrongpass reason", err, body)
	}
	if code, _ := s.call(t, "DELETE", "/rate-limiting/plugins/p-pw/counters/192.0.2.1", ""); code != http.StatusUnauthorized {
		t.Errorf("DELETE without the token: %d, want 401", code)
	}
	if code, body := s.call(t, "DELETE", "/rate-limiting/plugins/p-pw/counters/192.0.2.1", token); code != http.StatusNoContent && code != http.StatusServiceUnavailable {
		t.Errorf("DELETE with the token: %d %s", code, body)
	}

	captured = append(captured, s.logs())
	all := strings.Join(captured, "\n")
	for _, secret := range []string{token, rightPW, wrongPW, hostPW} {
		if strings.Contains(all, secret) {
			t.Errorf("%q reached kong.log, the server log or an inspect answer:\n%s", secret, all)
		}
	}
}

// sluice-concurrency's inspect listener takes the same token.
func TestConcurrencyServerInspectToken(t *testing.T) {
	const token = "conc-tok-s3cret"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_ADMIN_TOKEN_FILE", tokenFile)
	s := startPluginServer(t, buildPlugin(t, "sluice-concurrency"), "-inspect-listen", "127.0.0.1:0")
	if code, _ := s.call(t, "GET", "/rate-limiting/plugins", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, body := s.call(t, "GET", "/rate-limiting/plugins", token); code != http.StatusOK {
		t.Errorf("with the token: %d %s, want 200", code, body)
	}
	if strings.Contains(s.logs(), token) {
		t.Errorf("the token is in the log:\n%s", s.logs())
	}
}
