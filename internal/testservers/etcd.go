package testservers

import (
	"crypto/rand"
	"encoding/hex"
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
	// A member name of our own tells our etcd from another test's that may
	// have taken the port between the free-port probe and our bind.
	var tok [8]byte
	rand.Read(tok[:])
	name := "testservers-" + hex.EncodeToString(tok[:])
	peer := 0 // chosen once, so Restart keeps the member's peer URL
	e.p = &proc{
		name: "etcd",
		bin:  "etcd",
		dir:  dir,
		args: func(port int) []string {
			if peer == 0 {
				var err error
				if peer, err = freePort(0); err != nil {
					peer = port + 1
				}
			}
			cu := "http://127.0.0.1:" + strconv.Itoa(port)
			pu := "http://127.0.0.1:" + strconv.Itoa(peer)
			return []string{"--name", name, "--data-dir", dir + "/data",
				"--listen-client-urls", cu, "--advertise-client-urls", cu,
				"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
				"--initial-cluster", name + "=" + pu, "--log-level", "warn"}
		},
		ready: func(port, _ int) error {
			resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/health")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"health":"true"`) {
				return fmt.Errorf("health %s", b)
			}
			resp2, err := client.Post("http://127.0.0.1:"+strconv.Itoa(port)+"/v3/cluster/member/list", "application/json", strings.NewReader("{}"))
			if err != nil {
				return err
			}
			defer resp2.Body.Close()
			b, _ = io.ReadAll(resp2.Body)
			if !strings.Contains(string(b), name) {
				return fmt.Errorf("port answered by another etcd: %s", b)
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

// Restart starts a stopped etcd again on the same ports with the same data
// and waits until it is healthy. It fails the test if a port was taken
// meanwhile or etcd does not start.
func (e *EtcdServer) Restart(t testing.TB) {
	t.Helper()
	e.p.kill()
	if err := e.p.launch(); err != nil {
		t.Fatalf("testservers: restarting etcd on port %d: %v", e.p.port, err)
	}
}
