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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/internal/kongplugin"
	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// stepDeadline bounds one step: a node that waited for a Redis connect
// timeout (a minute in the silent case) fails the step instead of
// stalling the test.
const stepDeadline = 20 * time.Second

// concStep is one step on one node: "gateway" and "gateway2" are two
// gateways, "kong" and "kong2" two Kong nodes (plugin-server processes).
//
// A request step sends a request and, with hold set, keeps a granted
// lease under the name hold: the gateway's response streams until the
// lease is released, the Kong request waits for its log phase. Without
// hold, an allowed request ends at once (the Kong one runs its log
// phase). release ends the held request of that name: the gateway's
// client goes away mid-stream, the Kong request runs its log phase.
// advance moves every node's clock.
type concStep struct {
	node    string
	hold    string
	release string
	advance time.Duration

	status     int // 0: allowed
	remaining  int // X-Concurrency-Remaining; -1: not checked
	retryAfter int // Retry-After of a rejection; 0: at least 1
	// retry repeats the request until it gets status, within
	// stepDeadline: a gateway releases a lease once it has seen its
	// client go.
	retry bool
}

func TestConcurrencyAcrossAdapters(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{Password: "s3cret"})
	refused := closedPort(t)
	silent := silentListener(t)

	cases := []struct {
		name   string
		config string // sluice-concurrency's config, JSON; %d is the Redis port
		port   int
		limit  string // X-Concurrency-Limit
		steps  []concStep
		// quiet: no Kong node logs anything; inRedis: the leases are keys
		// in Redis.
		quiet, inRedis bool
	}{
		{
			name:   "a gateway and a Kong node on one Redis share a limit of 2",
			config: `{"limit": 2, "namespace": "shared-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "password": "s3cret"}}`,
			port:   rs.Port(),
			limit:  "2",
			steps: []concStep{
				{node: "gateway", hold: "a", remaining: 1}, {node: "kong", hold: "b", remaining: 0},
				{node: "gateway", status: 429, remaining: 0}, {node: "kong", status: 429, remaining: 0},
			},
			quiet: true, inRedis: true,
		},
		{
			name:   "two gateways and two Kong nodes on one Redis: a release on one node frees a slot for the others",
			config: `{"limit": 2, "lease_ttl": 3600, "namespace": "nodes-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "password": "s3cret", "timeout": 2000}}`,
			port:   rs.Port(),
			limit:  "2",
			steps: []concStep{
				{node: "gateway", hold: "a", remaining: 1}, {node: "kong2", hold: "b", remaining: 0},
				{node: "kong", status: 429, remaining: 0}, {node: "gateway2", status: 429, remaining: 0},
				// The gateway's client leaves mid-stream: the slot is free
				// on every node.
				{node: "gateway", release: "a"},
				{node: "kong", hold: "c", remaining: 0, retry: true},
				{node: "gateway2", status: 429, remaining: 0},
				{node: "kong2", release: "b"},
				{node: "gateway2", hold: "d", remaining: 0},
				{node: "gateway", status: 429, remaining: 0},
				{node: "kong", release: "c"},
				// d and the request itself: none left.
				{node: "kong2", remaining: 0},
				{node: "gateway", remaining: 0},
			},
			quiet: true, inRedis: true,
		},
		{
			name:   "Redis refused at the first request: local leases, no 5xx",
			config: `{"limit": 2, "namespace": "refused-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "timeout": 100}}`,
			port:   refused,
			limit:  "2",
			steps: []concStep{
				{node: "kong", hold: "a", remaining: 1}, {node: "kong", hold: "b", remaining: 0}, {node: "kong", status: 429, remaining: 0},
				{node: "gateway", hold: "c", remaining: 1}, {node: "gateway", hold: "d", remaining: 0}, {node: "gateway", status: 429, remaining: 0},
			},
		},
		{
			// The connect timeout is a minute: a first request that waited
			// for it would miss stepDeadline.
			name:   "Redis that never answers: the first request is bounded by the call deadline",
			config: `{"limit": 1, "namespace": "silent-%d", "strategy": "redis", "redis": {"host": "127.0.0.1", "port": %d, "timeout": 60000}}`,
			port:   silent.port,
			limit:  "1",
			steps: []concStep{
				{node: "kong", hold: "a", remaining: 0}, {node: "kong", status: 429, remaining: 0},
				{node: "gateway", hold: "b", remaining: 0}, {node: "gateway", status: 429, remaining: 0},
			},
		},
		{
			name:   "local leases are per node",
			config: `{"limit": 1, "namespace": "local-%d%.0d"}`,
			limit:  "1",
			steps: []concStep{
				{node: "gateway", hold: "a", remaining: 0}, {node: "kong", hold: "b", remaining: 0},
				{node: "gateway", status: 429, remaining: 0}, {node: "kong", status: 429, remaining: 0},
			},
			quiet: true,
		},
		{
			name:   "a rejection waits for the oldest lease; a release frees its slot, the TTL frees a slot never released",
			config: `{"limit": 2, "lease_ttl": 30, "namespace": "ttl-%d%.0d"}`,
			limit:  "2",
			steps: perNode(
				concStep{hold: "1", remaining: 1}, concStep{hold: "2", remaining: 0},
				concStep{advance: 10 * time.Second},
				concStep{status: 429, remaining: 0, retryAfter: 20},
				concStep{release: "1"},
				concStep{hold: "3", remaining: 0, retry: true},
				concStep{status: 429, remaining: 0, retryAfter: 20},
				// Lease 2 was taken 30 s ago and never released.
				concStep{advance: 20 * time.Second},
				concStep{hold: "4", remaining: 0},
				concStep{status: 429, remaining: 0, retryAfter: 10},
			),
			quiet: true,
		},
	}

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := fmt.Sprintf(tc.config, i, tc.port)
			clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			nodes := map[string]node{
				"gateway":  startGateway(t, conf, clk),
				"gateway2": startGateway(t, conf, clk),
				"kong":     startKong(t, conf, clk),
				"kong2":    startKong(t, conf, clk),
			}
			// Dials to the silent listener end before the nodes close.
			t.Cleanup(silent.dropConns)
			held := map[string]func(){}
			// Leases still held end before the nodes close: a gateway
			// streaming to a client that does not read never finishes.
			t.Cleanup(func() {
				for _, rel := range held {
					rel()
				}
			})
			for j, st := range tc.steps {
				switch {
				case st.advance > 0:
					clk.advance(st.advance)
					continue
				case st.release != "":
					rel, ok := held[st.release]
					if !ok {
						t.Fatalf("step %d: no lease %q held", j, st.release)
					}
					delete(held, st.release)
					rel()
					continue
				}
				n := nodes[st.node]
				deadline := time.Now().Add(stepDeadline)
				var a answer
				for {
					a = bounded(t, j, func() answer { return n.request(t, st.hold != "") })
					if a.status == st.status || !st.retry || time.Now().After(deadline) {
						break
					}
					<-time.After(10 * time.Millisecond) // poll interval, bounded by the deadline
				}
				if a.release != nil {
					if st.hold == "" {
						t.Fatalf("step %d: a lease held without a name", j)
					}
					held[st.hold] = a.release
				}
				h := a.h
				if a.status != st.status {
					t.Fatalf("step %d (%s): status %d, want %d (headers %v)", j, st.node, a.status, st.status, h)
				}
				if got := h.Get("X-Concurrency-Limit"); got != tc.limit {
					t.Errorf("step %d (%s): X-Concurrency-Limit %q, want %q (headers %v)", j, st.node, got, tc.limit, h)
				}
				if got := h.Get("X-Concurrency-Remaining"); got == "" || st.remaining >= 0 && got != strconv.Itoa(st.remaining) {
					t.Errorf("step %d (%s): X-Concurrency-Remaining %q, want %d (headers %v)", j, st.node, got, st.remaining, h)
				}
				if a.status != 0 {
					ra, err := strconv.Atoi(h.Get("Retry-After"))
					if err != nil || ra < 1 || st.retryAfter > 0 && ra != st.retryAfter {
						t.Errorf("step %d (%s): Retry-After %q, want %d (headers %v)", j, st.node, h.Get("Retry-After"), st.retryAfter, h)
					}
					if a.body != `{"message":"Too many concurrent requests"}` || h.Get("Content-Type") != "application/json; charset=utf-8" {
						t.Errorf("step %d (%s): rejection %q, Content-Type %q", j, st.node, a.body, h.Get("Content-Type"))
					}
				}
				if tc.quiet && len(a.logs) > 0 {
					t.Errorf("step %d (%s): Kong logs %q", j, st.node, a.logs)
				}
			}
			if tc.inRedis {
				if n := rs.Do(t, "DBSIZE"); n == int64(0) {
					t.Errorf("no leases in Redis")
				}
			}
		})
	}
}

// perNode runs steps on the gateway, then on the Kong node.
func perNode(steps ...concStep) []concStep {
	var out []concStep
	for _, n := range []string{"gateway", "kong"} {
		for _, st := range steps {
			st.node = n
			if st.hold != "" {
				st.hold = n + st.hold
			}
			if st.release != "" {
				st.release = n + st.release
			}
			out = append(out, st)
		}
	}
	return out
}

// bounded runs one request, failing the test when it has not answered
// within stepDeadline.
func bounded(t *testing.T, step int, f func() answer) answer {
	t.Helper()
	ch := make(chan answer, 1)
	go func() { ch <- f() }()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("step %d: %v", step, a.err)
		}
		return a
	case <-time.After(stepDeadline):
		t.Fatalf("step %d: no answer within %s", step, stepDeadline)
		return answer{}
	}
}

// clock is the fake clock every node of a case decides with.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// answer is a node's answer to one request. status is 0 when allowed;
// release, when not nil, ends the held lease.
type answer struct {
	status  int
	h       http.Header
	body    string
	logs    []string
	release func()
	err     error
}

type node interface {
	request(t *testing.T, hold bool) answer
}

// kongNode is one plugin-server process with one sluice-concurrency
// instance.
type kongNode struct {
	kc *kongplugin.ConcurrencyConfig
}

func startKong(t *testing.T, conf string, clk *clock) *kongNode {
	p := kongplugin.NewProcess(kongplugin.Options{Now: clk.now})
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the Kong process: %v", err)
		}
	})
	kc := p.NewConcurrency().(*kongplugin.ConcurrencyConfig)
	if err := json.Unmarshal([]byte(conf), kc); err != nil {
		t.Fatal(err)
	}
	return &kongNode{kc: kc}
}

func (n *kongNode) request(t *testing.T, hold bool) answer {
	// The gateway sees the test's client as 127.0.0.1.
	k := kongtest.New(t, kongtest.Request{ForwardedIP: "127.0.0.1"})
	k.Run(n.kc.Access)
	a := answer{h: k.ResponseHeaders(), logs: k.Logs()}
	if e := k.Exit(); e != nil {
		a.status, a.h, a.body = e.Status, e.Headers, string(e.Body)
		return a
	}
	release := func() { k.Run(n.kc.Log) }
	if !hold {
		release()
		return a
	}
	a.release = release
	return a
}

// gatewayNode is a gateway in front of an upstream whose /hold responses
// stream until their client goes away or the test ends.
type gatewayNode struct {
	base string
}

func startGateway(t *testing.T, plugin string, clk *clock) *gatewayNode {
	t.Helper()
	done := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			return
		}
		// Stream until the gateway goes away: it notices a client that left
		// when it writes to it (docs/gateway.md), and flow control stalls
		// the writes while the client does not read.
		chunk := []byte("streaming" + strings.Repeat(".", 4096))
		for {
			select {
			case <-done:
				return
			case <-r.Context().Done():
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	g, err := gateway.New(gateway.Options{Now: clk.now})
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
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	t.Cleanup(func() {
		close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-served
	})
	return &gatewayNode{base: "http://" + ln.Addr().String()}
}

// request sends one request; with hold, an allowed one stays open, its
// response streaming, until release.
func (n *gatewayNode) request(t *testing.T, hold bool) answer {
	path := "/quick"
	if hold {
		path = "/hold"
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", n.base+path, nil)
	if err != nil {
		cancel()
		return answer{err: err}
	}
	tr := &http.Transport{}
	res, err := tr.RoundTrip(req)
	if err != nil {
		cancel()
		return answer{err: err}
	}
	a := answer{h: res.Header}
	if res.StatusCode != 200 || !hold {
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		tr.CloseIdleConnections()
		if res.StatusCode != 200 {
			a.status = res.StatusCode
		}
		a.body, a.err = string(b), err
		return a
	}
	// The first chunk proves the upstream holds the request.
	if _, err := io.ReadFull(res.Body, make([]byte, len("streaming"))); err != nil {
		cancel()
		return answer{err: err}
	}
	a.release = func() {
		cancel() // the client goes away mid-stream
		res.Body.Close()
		tr.CloseIdleConnections()
	}
	return a
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
