package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
)

func TestHelpAndVersionFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		out, err := command(t, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "sluice validate kong.yml") || strings.Contains(string(out), "Usage of") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, err := command(t, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), "sluice ") {
			t.Errorf("%v: %q %v", args, out, err)
		}
	}
	out, err := command(t, "run", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage: sluice run") || !strings.Contains(string(out), "-proxy-listen") {
		t.Errorf("run -h: %v\n%s", err, out)
	}
}

// TestMalformedEnvironment: a SLUICE_* value the flag would reject is an
// error naming the variable, never silently replaced by the default.
func TestMalformedEnvironment(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"SLUICE_WATCH=maybe", `SLUICE_WATCH="maybe": not a boolean`},
		{"SLUICE_READ_TIMEOUT=5", `SLUICE_READ_TIMEOUT="5": not a duration`},
		{"SLUICE_MAX_BODY_SIZE=1MB", `SLUICE_MAX_BODY_SIZE="1MB": not an integer`},
	} {
		cmd := command(t, "run", "-c", "examples/quickstart/kong.yml", "--proxy-listen", "127.0.0.1:0", "--admin-listen", "")
		cmd.Env = append(cmd.Env, tc.env)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%s: exit %v, want 2\n%s", tc.env, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: output lacks %q:\n%s", tc.env, tc.want, out)
		}
	}
}

// TestSIGHUPReload: with --watch=false, SIGHUP re-reads the file (systemd's
// ExecReload); a broken file on SIGHUP leaves the serving one in force.
func TestSIGHUPReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kong.yml")
	cfg := func(limit string) {
		b := []byte(`_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:9
    routes: [{name: r, paths: [/x]}]
    plugins:
      - name: rate-limiting
        config: {minute: ` + limit + `, policy: local}
`)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	generation := func(s *sluice) int {
		var st struct {
			Sluice struct{ Generation int } `json:"sluice"`
		}
		_, body := httpGetBodyMust(t, s.admin+"/status")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st.Sluice.Generation
	}
	waitGeneration := func(s *sluice, want int) {
		deadline := time.Now().Add(20 * time.Second)
		for generation(s) < want {
			if time.Now().After(deadline) {
				t.Fatalf("generation did not reach %d", want)
			}
			pollPause()
		}
	}
	cfg("3")
	s := start(t, "-c", path, "--watch=false")
	if g := generation(s); g != 1 {
		t.Fatalf("generation %d", g)
	}
	cfg("7")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitGeneration(s, 2)
	if res := get(t, s.proxy+"/x"); res.Header.Get("X-RateLimit-Limit-Minute") != "7" {
		t.Fatalf("after SIGHUP: %v", res.Header)
	}
	cfg("not-a-number")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	cfg("9")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitGeneration(s, 3)
	if res := get(t, s.proxy+"/x"); res.Header.Get("X-RateLimit-Limit-Minute") != "9" {
		t.Fatalf("after the second SIGHUP: %v", res.Header)
	}
	s.stop(t)
}

// TestStatusListen: --status-listen serves /status and /metrics and
// nothing of the admin API.
func TestStatusListen(t *testing.T) {
	port := freePort(t)
	s := start(t, "-c", "examples/quickstart/kong.yml", "--watch=false", "--status-listen", "127.0.0.1:"+port)
	base := "http://127.0.0.1:" + port
	if code, body := httpGetBodyMust(t, base+"/status"); code != 200 || !strings.Contains(body, "configuration_hash") {
		t.Errorf("/status: %d %s", code, body)
	}
	if code, body := httpGetBodyMust(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d", code)
	}
	for _, p := range []string{"/config", "/"} {
		if code, _ := httpGetBodyMust(t, base+p); code != 404 {
			t.Errorf("%s on the status listener: %d, want 404", p, code)
		}
	}
	res, err := http.Post(base+"/config", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 && res.StatusCode != 405 {
		t.Errorf("POST /config on the status listener: %d", res.StatusCode)
	}
	s.stop(t)
}

// TestReleaseGatewayAndDecision runs scripts/release for the gateway and
// the decision service (the Kong plugins' tarballs are checked in
// internal/kongplugin), unpacks each binary and asks its version.
func TestReleaseGatewayAndDecision(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	const version = "v1.2.3-test.1"
	cmd := exec.Command(filepath.Join(root, "scripts/release"), version)
	cmd.Env = append(os.Environ(), "DIST="+dist, "ARCHS=amd64", "BINARIES=sluice sluice-decision", "COMMIT=0123456789ab")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bin, arg string }{{"sluice", "version"}, {"sluice-decision", "-version"}} {
		name := tc.bin + "-" + version + "-linux-amd64"
		if !bytes.Contains(sums, []byte("  "+name+".tar.gz\n")) {
			t.Errorf("SHA256SUMS lacks %s:\n%s", name, sums)
		}
		bin := unpack(t, filepath.Join(dist, name+".tar.gz"), name+"/"+tc.bin)
		out, err := exec.Command(bin, tc.arg).Output()
		want := tc.bin + " " + version + " (commit 0123456789ab)\n"
		if err != nil || string(out) != want {
			t.Errorf("%s %s = %q, %v; want %q", tc.bin, tc.arg, out, err, want)
		}
	}
}

// unpack extracts member of the tarball into a temporary directory and
// returns its path.
func unpack(t *testing.T, tarball, member string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s (%v)", tarball, member, err)
		}
		if h.Name != member {
			continue
		}
		out := filepath.Join(t.TempDir(), filepath.Base(member))
		w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestAdminListenNeedsToken: an admin listener other machines can reach is
// refused without --admin-token; with one, calls need Kong-Admin-Token.
func TestAdminListenNeedsToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		out, err := command(t, "run", "-c", "examples/quickstart/kong.yml", "--proxy-listen", "127.0.0.1:0", "--admin-listen", addr).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--admin-token") {
			t.Errorf("--admin-listen %s without a token: %v\n%s", addr, err, out)
		}
	}
	// Kong's listen flags are refused on the admin and status listeners,
	// before anything listens.
	for _, c := range []struct{ flag, addr string }{{"--admin-listen", "127.0.0.1:0 ssl"}, {"--status-listen", "127.0.0.1:0 http2"}, {"--admin-listen", "127.0.0.1"}} {
		out, err := command(t, "run", "-c", "examples/quickstart/kong.yml", "--proxy-listen", "127.0.0.1:0", c.flag, c.addr).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.flag) || strings.Contains(string(out), "listening") {
			t.Errorf("%s %q: %v\n%s", c.flag, c.addr, err, out)
		}
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := command(t, "run", "-c", "examples/quickstart/kong.yml", "--admin-token", "x", "--admin-token-file", tokFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--admin-token and --admin-token-file: give one") {
		t.Errorf("both token flags: %v\n%s", err, out)
	}
	// The token from SLUICE_ADMIN_TOKEN, or from a file (SLUICE_ADMIN_TOKEN_FILE).
	for _, env := range []string{"SLUICE_ADMIN_TOKEN=tok-123", "SLUICE_ADMIN_TOKEN_FILE=" + tokFile} {
		t.Run(env[:strings.IndexByte(env, '=')], func(t *testing.T) {
			cmd := command(t, "run", "-c", "examples/quickstart/kong.yml", "--proxy-listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0", "--watch=false", "--access-log=false")
			cmd.Env = append(cmd.Env, env)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr lockedBuffer // written by os/exec's copying goroutine while the test reads it
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(stdout)
			var adminAddr string
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "admin listening on "); ok {
					adminAddr = v
					break
				}
			}
			if adminAddr == "" {
				t.Fatalf("no admin listener\n%s", stderr.String())
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			url := "http://127.0.0.1:" + adminAddr[strings.LastIndexByte(adminAddr, ':')+1:] + "/status"
			if code, _ := httpGetBodyMust(t, url); code != 401 {
				t.Errorf("without the token: %d, want 401", code)
			}
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Kong-Admin-Token", "tok-123")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Errorf("with the token: %d", res.StatusCode)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // stderr is written by cmd's goroutine until then
			if strings.Contains(stderr.String(), "tok-123") {
				t.Errorf("the token is in the log:\n%s", stderr.String())
			}
		})
	}
}

// TestPostConfigOwnedBySource: with a watched file, POST /config is 409
// naming the file; with --watch=false it loads, as Kong DB-less does.
func TestPostConfigOwnedBySource(t *testing.T) {
	for _, tc := range []struct {
		watch string
		want  int
	}{{"--watch=true", 409}, {"--watch=false", 201}} {
		s := start(t, "-c", "examples/quickstart/kong.yml", tc.watch)
		data, err := os.ReadFile("../../examples/quickstart/kong.yml")
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.Post(s.admin+"/config", "application/yaml", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.watch, res.StatusCode, body, tc.want)
		}
		if tc.want == 409 && !strings.Contains(string(body), "examples/quickstart/kong.yml") {
			t.Errorf("the 409 does not name the file: %s", body)
		}
		s.stop(t)
	}
}

// TestBehindNginx: nginx proxy_pass in front of the gateway; the client
// sees the gateway's 200s, then its 429 with Retry-After and the
// rate-limit headers, never a 5xx. The client address reaches the
// gateway in X-Real-IP from the trusted nginx.
func TestBehindNginx(t *testing.T) {
	s := start(t, "-c", "examples/quickstart/kong.yml", "--watch=false", "--echo", "127.0.0.1:"+freePort(t), "--trusted-ips", "127.0.0.1/32")
	ngx := testservers.Nginx(t, "", `
    location / {
        proxy_pass `+s.proxy+`;
        proxy_set_header X-Real-IP $remote_addr;
    }`)
	for i := 1; i <= 5; i++ {
		res := get(t, ngx.URL()+"/echo")
		if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining-Minute") != strconv.Itoa(5-i) {
			t.Fatalf("request %d: %d %v\n%s", i, res.StatusCode, res.Header, ngx.ErrorLog())
		}
	}
	res := get(t, ngx.URL()+"/echo")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || res.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("6th request: %d %v", res.StatusCode, res.Header)
	}
	s.stop(t)
}

// TestIgnorePlugins: sluice validate refuses a plugin it does not
// implement, naming it, and accepts the file with --ignore-plugins;
// ignoring an authentication plugin is refused.
func TestIgnorePlugins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kong.yml")
	if err := os.WriteFile(path, []byte(`_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:9
    routes: [{name: r, paths: [/]}]
    plugins:
      - {name: zipkin, enabled: false}
      - {name: datadog}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := command(t, "validate", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "plugin 'datadog' is not implemented by sluice") || strings.Contains(string(out), "'zipkin'") {
		t.Errorf("without --ignore-plugins: %v\n%s", err, out)
	}
	if out, err := command(t, "validate", "--ignore-plugins", "datadog", path).CombinedOutput(); err != nil {
		t.Errorf("with --ignore-plugins: %v\n%s", err, out)
	}
	out, err = command(t, "validate", "--ignore-plugins", "hmac-auth", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "would leave its routes open") {
		t.Errorf("--ignore-plugins hmac-auth: %v\n%s", err, out)
	}
}
