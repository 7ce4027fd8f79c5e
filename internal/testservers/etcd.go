package testservers

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EtcdServer is a running single-member etcd.
type EtcdServer struct {
	p *proc
}

// Etcd starts a single-member etcd (Debian's etcd-server package) with its
// data in t.TempDir(), serving plain HTTP on a loopback port, and waits
// until /health reports true.
func Etcd(t testing.TB) *EtcdServer {
	t.Helper()
	dir := t.TempDir()
	e := &EtcdServer{}
	client := &http.Client{Timeout: time.Second}
	e.p = &proc{
		name: "etcd",
		bin:  "etcd",
		dir:  dir,
		args: func(port int) []string {
			peer, err := freePort(0)
			if err != nil {
				peer = port + 1
			}
			cu := "http://127.0.0.1:" + strconv.Itoa(port)
			pu := "http://127.0.0.1:" + strconv.Itoa(peer)
			return []string{"--name", "default", "--data-dir", dir + "/data",
				"--listen-client-urls", cu, "--advertise-client-urls", cu,
				"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
				"--initial-cluster", "default=" + pu, "--log-level", "warn"}
		},
		ready: func(port int) error {
			resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/health")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"health":"true"`) {
				return fmt.Errorf("health %s", b)
			}
			return nil
		},
	}
	startProc(t, e.p)
	return e
}

// Endpoint returns the client URL, "http://127.0.0.1:port".
func (e *EtcdServer) Endpoint() string { return "http://" + e.p.addr() }

// Stop kills etcd and waits for it to exit.
func (e *EtcdServer) Stop() { e.p.kill() }
