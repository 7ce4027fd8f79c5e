package testservers

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NginxServer is a running nginx.
type NginxServer struct {
	p *proc
}

// Nginx starts nginx (Debian's nginx-light package) in the foreground,
// with its prefix, logs and temporary files in t.TempDir(), serving one
// server on a free loopback port. server is the body of that server block
// (locations and directives); http holds extra http-level directives
// (upstreams, maps), or "".
func Nginx(t testing.TB, http_, server string) *NginxServer {
	t.Helper()
	dir := t.TempDir()
	var tok [8]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	client := &http.Client{Timeout: time.Second}
	n := &NginxServer{}
	n.p = &proc{
		name: "nginx",
		bin:  "nginx",
		dir:  dir,
		args: func(port int) []string {
			conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
%[4]s
  server {
    listen 127.0.0.1:%[2]d;
    location = /__testservers_ready { return 200 "%[3]s"; }
%[5]s
  }
}
`, dir, port, token, http_, server)
			path := filepath.Join(dir, "nginx."+strconv.Itoa(port)+".conf")
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")}
		},
		ready: func(port, _ int) error {
			res, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/__testservers_ready")
			if err != nil {
				return err
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if strings.TrimSpace(string(b)) != token {
				return fmt.Errorf("port answered by another server: %q", b)
			}
			return nil
		},
	}
	startProc(t, n.p)
	return n
}

// URL returns "http://127.0.0.1:port".
func (n *NginxServer) URL() string { return "http://" + n.p.addr() }

// ErrorLog returns nginx's error log, for test failure messages.
func (n *NginxServer) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.p.dir, "error.log"))
	return string(b)
}
