package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const openPortWarning = "the HTTP port is not on loopback and -admin-token is not set"

// stop ends the service with SIGTERM and returns its stderr once it exited.
func (s *service) stop(t *testing.T) string {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", s.stderr)
	}
	return s.stderr.String()
}

// SLUICE_ADMIN_TOKEN guards the counters calls with Kong-Admin-Token; the
// token is never logged.
func TestAdminTokenFromEnv(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, []string{"SLUICE_ADMIN_TOKEN=s3cret-tok"}, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	if code, _ := s.get(t, "/rate-limiting/top"); code != http.StatusUnauthorized {
		t.Fatalf("top without the token: %d, want 401", code)
	}
	req, _ := http.NewRequest("DELETE", s.http+"/rate-limiting/counters?domain=d&key=k&value=v", nil)
	req.Header.Set("Kong-Admin-Token", "s3cret-tok")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("reset with the token: %d, want 404 (past the guard, nothing held)", res.StatusCode)
	}
	if code, _ := s.get(t, "/healthcheck"); code != http.StatusOK {
		t.Fatalf("healthcheck: %d", code)
	}
	if logs := s.stop(t); strings.Contains(logs, "s3cret-tok") || strings.Contains(logs, openPortWarning) {
		t.Fatalf("logs hold the token or the open-port warning:\n%s", logs)
	}
}

// On a loopback HTTP port the counters calls answer only the loopback
// names of that port: a page on another name resolved to 127.0.0.1 (DNS
// rebinding) cannot read or reset counters; decisions answer any Host.
func TestCountersLoopbackHosts(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, nil, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	do := func(method, path, host string) int {
		t.Helper()
		req, _ := http.NewRequest(method, s.http+path, strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	counter := "/rate-limiting/counters?domain=d&key=k&value=v"
	if code := do("DELETE", counter, "rebind.evil.example:80"); code != http.StatusMisdirectedRequest {
		t.Errorf("DELETE with a foreign Host: %d, want 421", code)
	}
	if code := do("POST", "/json", "rebind.evil.example:80"); code != http.StatusOK {
		t.Errorf("POST /json with a foreign Host: %d, want 200", code)
	}
	if code := do("DELETE", counter, ""); code != http.StatusNoContent {
		t.Errorf("DELETE of the counted descriptor: %d, want 204", code)
	}
}

// A non-loopback HTTP port without a token starts (the container image and
// the Helm chart listen on 0.0.0.0) and says in the log that the counters
// calls are open; with a token it does not.
func TestNonLoopbackHTTPWithoutToken(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, nil, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "0.0.0.0:0")
	waitFor(t, s, "the open-port warning", func() bool { return strings.Contains(s.stderr.String(), openPortWarning) })
	s.stop(t)

	s = startWith(t, nil, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "0.0.0.0:0", "-admin-token", "t", "-debug", "127.0.0.1:0")
	if logs := s.stop(t); strings.Contains(logs, openPortWarning) || strings.Contains(logs, debugPortWarning) {
		t.Fatalf("warning with a token set, or for a loopback debug port:\n%s", logs)
	}

	// The debug port has no token: off loopback it is warned about.
	s = startWith(t, nil, "-c", cfg, "-grpc", "127.0.0.1:0", "-debug", "0.0.0.0:0")
	waitFor(t, s, "the debug-port warning", func() bool { return strings.Contains(s.stderr.String(), debugPortWarning) })
	s.stop(t)
}

// SLUICE_ADMIN_TOKEN_FILE (-admin-token-file) reads the token from a file,
// so it is not on the command line.
func TestAdminTokenFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	tok := filepath.Join(t.TempDir(), "token")
	writeFile(t, tok, "s3cret-file-tok\n")
	s := startWith(t, []string{"SLUICE_ADMIN_TOKEN_FILE=" + tok}, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	if code, _ := s.get(t, "/rate-limiting/top"); code != http.StatusUnauthorized {
		t.Fatalf("top without the token: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", s.http+"/rate-limiting/top", nil)
	req.Header.Set("Kong-Admin-Token", "s3cret-file-tok")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("top with the token: %d, want 200", res.StatusCode)
	}
	if logs := s.stop(t); strings.Contains(logs, "s3cret-file-tok") {
		t.Fatalf("logs hold the token:\n%s", logs)
	}
	out, err := command(t, "-c", cfg, "-check", "-admin-token", "x", "-admin-token-file", tok).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-admin-token and -admin-token-file: give one") {
		t.Errorf("both token flags: %v\n%s", err, out)
	}
}
