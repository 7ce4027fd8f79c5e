package main

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestProxyListenSyntax: Kong's proxy_listen syntax with several
// listeners, TLS and HTTP/2 on one of them; a bad value exits 2 naming it.
func TestProxyListenSyntax(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"0.0.0.0:8000 http2", "--proxy-listen: 0.0.0.0:8000: http2 without ssl (cleartext HTTP/2) is not supported"},
		{"127.0.0.1:0 spdy", `--proxy-listen: 127.0.0.1:0: unknown listen flag "spdy"`},
	} {
		out, err := command(t, "run", "-c", "examples/quickstart/kong.yml", "--proxy-listen", tc.listen, "--admin-listen", "").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: exit %v, want 2 and %q:\n%s", tc.listen, err, tc.want, out)
		}
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed: ", err)
	}
	cmd := command(t, "run", "-c", "examples/quickstart/kong.yml", "--echo", "127.0.0.1:0", "--admin-listen", "", "--access-log=false",
		"--proxy-listen", "127.0.0.1:0 reuseport backlog=64, 127.0.0.1:0 ssl http2")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrs := make(chan [2]string, 1)
	go func() {
		var a [2]string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "proxy listening on "); ok {
				a[0] = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "proxy (TLS, HTTP/2) listening on "); ok {
				a[1] = v
			}
			if a[0] != "" && a[1] != "" {
				addrs <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not come up\n%s", stderr.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"http://" + a[0] + "/"}, "1.1"},
		{[]string{"-k", "--http2", "https://" + a[1] + "/"}, "2"},
		{[]string{"-k", "--http1.1", "https://" + a[1] + "/"}, "1.1"},
	} {
		out, err := exec.Command(curl, append([]string{"-sS", "-o", "/dev/null", "-w", "%{http_version}"}, c.args...)...).CombinedOutput()
		if err != nil || string(out) != c.want {
			t.Errorf("curl %v: %q %v, want HTTP version %s", c.args, out, err, c.want)
		}
	}
}
