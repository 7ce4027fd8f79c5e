// Package adaptertest runs behaviour tables through more than one adapter
// at once: the sluice gateway over real sockets and the Kong plugin
// through the fake Kong (internal/kongplugin/kongtest), on one Redis where
// the case needs it.
package adaptertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/internal/kongplugin"
	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// concStep is one request to one node. Hold keeps a granted lease: the
// gateway's request stays open upstream, the Kong request never runs its
// log phase.
type concStep struct {
	node   string // "gateway" or "kong"
	hold   bool
	status int // 0: allowed
}

func TestConcurrencyAcrossAdapters(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	refused := closedPort(t)
	silent := silentListener(t)
	cases := []struct {
		name   string
		config string // sluice-concurrency's config, JSON; %d is the Redis port
		port   int
		steps  []concStep
	}{
		{
			name:   "a gateway and a Kong node on one Redis share a limit of 2",
			config: `{"limit": 2, "namespace": "shared-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d}}`,
			port:   rs.Port(),
			steps: []concStep{
				{node: "gateway", hold: true}, {node: "kong", hold: true},
				{node: "gateway", status: 429}, {node: "kong", status: 429},
			},
		},
		{
			name:   "Redis refused at the first request: local leases, no 5xx",
			config: `{"limit": 2, "namespace": "refused-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "timeout": 100}}`,
			port:   refused,
			steps: []concStep{
				{node: "kong", hold: true}, {node: "kong", hold: true}, {node: "kong", status: 429},
				{node: "gateway", hold: true}, {node: "gateway", hold: true}, {node: "gateway", status: 429},
			},
		},
		{
			// The connect timeout is a minute: a first request that waited
			// for it would stall the test.
			name:   "Redis that never answers: the first request is bounded by the call deadline",
			config: `{"limit": 1, "namespace": "silent-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "timeout": 60000}}`,
			port:   silent.port,
			steps: []concStep{
				{node: "kong", hold: true}, {node: "kong", status: 429},
				{node: "gateway", hold: true}, {node: "gateway", status: 429},
			},
		},
		{
			name:   "local leases are per node",
			config: `{"limit": 1, "namespace": "local-%d%.0d"}`,
			steps: []concStep{
				{node: "gateway", hold: true}, {node: "kong", hold: true},
				{node: "gateway", status: 429}, {node: "kong", status: 429},
			},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := fmt.Sprintf(tc.config, i, tc.port)
			gw := startGateway(t, conf)
			p := kongplugin.NewProcess(kongplugin.Options{})
			t.Cleanup(func() {
				if err := p.Close(); err != nil {
					t.Errorf("closing the Kong process: %v", err)
				}
			})
			// Dials to the silent listener end before the nodes close.
			t.Cleanup(silent.dropConns)
			kc := p.NewConcurrency().(*kongplugin.ConcurrencyConfig)
			if err := json.Unmarshal([]byte(conf), kc); err != nil {
				t.Fatal(err)
			}
			for j, st := range tc.steps {
				var status int
				var h http.Header
				switch st.node {
				case "gateway":
					status, h = gw.request(t, st.hold)
				case "kong":
					// The gateway sees the test's client as 127.0.0.1.
					k := kongtest.New(t, kongtest.Request{ForwardedIP: "127.0.0.1"})
					k.Run(kc.Access)
					h = k.ResponseHeaders()
					if e := k.Exit(); e != nil {
						status, h = e.Status, e.Headers
					}
				}
				if status != st.status {
					t.Fatalf("step %d (%s): status %d, want %d (headers %v)", j, st.node, status, st.status, h)
				}
				if status != 0 {
					ra, err := strconv.Atoi(h.Get("Retry-After"))
					if err != nil || ra < 1 || h.Get("X-Concurrency-Remaining") != "0" {
						t.Errorf("step %d (%s): denial headers %v", j, st.node, h)
					}
				} else if h != nil && h.Get("X-Concurrency-Remaining") == "" {
					t.Errorf("step %d (%s): allowed without X-Concurrency-Remaining: %v", j, st.node, h)
				}
			}
		})
	}
}

// gatewayNode is a gateway in front of an upstream whose /hold requests
// stay open until the test ends.
type gatewayNode struct {
	base    string
	arrived chan struct{}
}

func startGateway(t *testing.T, plugin string) *gatewayNode {
	t.Helper()
	n := &gatewayNode{arrived: make(chan struct{}, 16)}
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			n.arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(up.Close)
	g, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`
_format_version: "3.0"
services: [{name: s, url: %q, routes: [{paths: [/], strip_path: false}]}]
plugins: [{name: sluice-concurrency, config: %s}]
`, up.URL, plugin)
	if err := g.Load([]byte(cfg), "test"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-done
	})
	n.base = "http://" + ln.Addr().String()
	return n
}

// request sends one request; with hold it returns once the upstream holds
// it (status 0) or the gateway answered without proxying.
func (n *gatewayNode) request(t *testing.T, hold bool) (int, http.Header) {
	t.Helper()
	path := "/quick"
	if hold {
		path = "/hold"
	}
	type answer struct {
		status int
		h      http.Header
		err    error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := http.Get(n.base + path)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		ch <- answer{status: res.StatusCode, h: res.Header}
	}()
	if hold {
		select {
		case <-n.arrived:
			return 0, nil
		case a := <-ch:
			if a.err != nil {
				t.Fatal(a.err)
			}
			return a.status, a.h
		}
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.status == 200 {
		return 0, a.h
	}
	return a.status, a.h
}

// closedPort returns a port on 127.0.0.1 where nothing listens.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// silent is a TCP listener on 127.0.0.1 that accepts connections and
// never answers on them.
type silent struct {
	port  int
	conns chan net.Conn
}

func silentListener(t *testing.T) *silent {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &silent{port: ln.Addr().(*net.TCPAddr).Port, conns: make(chan net.Conn, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	return s
}

// dropConns closes the connections accepted so far.
func (s *silent) dropConns() {
	for {
		select {
		case c := <-s.conns:
			c.Close()
		default:
			return
		}
	}
}
