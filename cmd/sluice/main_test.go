package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests run the real binary: the test binary re-executes itself with
// SLUICE_TEST_MAIN set and then behaves as sluice's main.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_MAIN") == "1" {
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
	cmd.Env = append(os.Environ(), "SLUICE_TEST_MAIN=1")
	cmd.Dir = "../.."
	return cmd
}

func TestVersion(t *testing.T) {
	out, err := command(t, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "sluice ") {
		t.Fatalf("%q %v", out, err)
	}
}

func TestValidate(t *testing.T) {
	for _, ex := range []string{"examples/quickstart/kong.yml", "examples/redis/kong.yml"} {
		out, err := command(t, "validate", ex).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "configuration is valid") {
			t.Fatalf("%s: %s %v", ex, out, err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    routes: [{paths: [x], methods: [get]}]
plugins:
  - name: rate-limiting-advanced
    config: {limit: [1], window_size: [60], colour: red}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, "validate", bad)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1", err)
	}
	for _, want := range []string{"services[0].routes[0].paths[0]", "services[0].routes[0].methods[0]", "plugins[0].config.colour"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, stderr.String())
		}
	}
}

// sluice is a running "sluice run".
type sluice struct {
	cmd   *exec.Cmd
	proxy string
	admin string
	done  chan error
}

func start(t *testing.T, args ...string) *sluice {
	t.Helper()
	cmd := command(t, append([]string{"run", "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--access-log=false"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sluice{cmd: cmd, done: make(chan error, 1)}
	addrs := make(chan [2]string, 1)
	go func() {
		var a [2]string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "proxy listening on "); ok {
				a[0] = v
			}
			if v, ok := strings.CutPrefix(line, "admin listening on "); ok {
				a[1] = v
				addrs <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { s.done <- cmd.Wait() }()
	select {
	case a := <-addrs:
		s.proxy, s.admin = "http://"+a[0], "http://"+a[1]
	case err := <-s.done:
		t.Fatalf("sluice exited: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("sluice did not come up\n%s", stderr.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// stop sends SIGTERM and checks a clean exit.
func (s *sluice) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sluice did not stop")
	}
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

func TestQuickstart(t *testing.T) {
	s := start(t, "-c", "examples/quickstart/kong.yml", "--watch=false")
	for i := 1; i <= 5; i++ {
		res := get(t, s.proxy+"/echo")
		if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining-Minute") != fmt.Sprint(5-i) {
			t.Fatalf("request %d: %d %v", i, res.StatusCode, res.Header)
		}
	}
	res := get(t, s.proxy+"/echo")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("6th request: %d %v", res.StatusCode, res.Header)
	}
	if res := get(t, s.proxy+"/api"); res.StatusCode != 401 {
		t.Errorf("/api without key: %d", res.StatusCode)
	}
	s.stop(t)
}

// TestEchoUpstreamAndFileReload proxies to the built-in echo upstream,
// then edits the watched file and waits (bounded) until the admin API
// reports the new generation.
func TestEchoUpstreamAndFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kong.yml")
	cfg := func(limit int) []byte {
		return []byte(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: api
    url: http://127.0.0.1:%s
    routes: [{name: api, paths: [/api]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [%d], window_size: [60], namespace: reload, identifier: ip}
`, "ECHOPORT", limit))
	}
	// A fixed echo port would collide with parallel runs: reserve one.
	port := freePort(t)
	write := func(limit int) {
		b := bytes.ReplaceAll(cfg(limit), []byte("ECHOPORT"), []byte(port))
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(3)
	s := start(t, "-c", path, "--echo", "127.0.0.1:"+port)
	res := get(t, s.proxy+"/api/x")
	if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit-Minute") != "3" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	write(50)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Sluice struct{ Generation int } `json:"sluice"`
		}
		res, err := http.Get(s.admin + "/status")
		if err == nil {
			_ = json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
		}
		if st.Sluice.Generation >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the edited file was not applied")
		}
		pollPause()
	}
	res = get(t, s.proxy+"/api/x")
	if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit-Minute") != "50" || res.Header.Get("X-RateLimit-Remaining-Minute") != "48" {
		t.Fatalf("after reload: %d %v (the counter must survive the reload)", res.StatusCode, res.Header)
	}
	s.stop(t)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := strings.Cut(ln.Addr().String(), ":")
	return port
}

// TestRunRejectsInvalidConfig: "sluice run" with an invalid file exits 1
// naming the field, without serving.
func TestRunRejectsInvalidConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("_format_version: \"3.0\"\nservices: [{name: s, colour: red}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, "run", "-c", bad, "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "services[0].colour") {
		t.Errorf("stderr does not name the field:\n%s", stderr.String())
	}
	cmd = command(t, "frobnicate")
	if err := cmd.Run(); err == nil {
		t.Error("an unknown command succeeded")
	}
}
