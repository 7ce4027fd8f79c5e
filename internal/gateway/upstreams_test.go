package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

func testBalancer(t *testing.T, yaml string) *balancer {
	t.Helper()
	cfg, errs := kongconf.Decode([]byte("_format_version: \"3.0\"\nupstreams:\n" + yaml))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return newBalancer(cfg.Upstreams[0])
}

func TestRoundRobinWeights(t *testing.T) {
	b := testBalancer(t, `- name: u
  targets:
  - {target: "10.0.0.1:80", weight: 100}
  - {target: "10.0.0.2:80", weight: 50}
  - {target: "10.0.0.3:80", weight: 0}
  - {target: "10.0.0.4:80"}
`)
	got := map[string]int{}
	for range 2500 {
		got[b.pick("", nil).addr]++
	}
	// Smooth weighted round-robin is exact over whole cycles of 250.
	want := map[string]int{"10.0.0.1:80": 1000, "10.0.0.2:80": 500, "10.0.0.4:80": 1000}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("picks %v, want %v (weight 0 never)", got, want)
	}
	// An unhealthy target is skipped; a retry avoids the tried one.
	b.targets[0].healthy.Store(false)
	for range 100 {
		if p := b.pick("", nil); p.addr == "10.0.0.1:80" {
			t.Fatal("picked an unhealthy target")
		}
	}
	first := b.pick("", nil)
	if again := b.pick("", []*target{first}); again == first {
		t.Error("a retry picked the tried target while another was healthy")
	}
	for _, tg := range b.targets {
		tg.healthy.Store(false)
	}
	if p := b.pick("", nil); p != nil {
		t.Errorf("no healthy target: picked %s", p.addr)
	}
}

func TestConsistentHashingDistribution(t *testing.T) {
	b := testBalancer(t, `- name: u
  algorithm: consistent-hashing
  hash_on: header
  hash_on_header: X-User
  targets:
  - {target: "10.0.0.1:80", weight: 100}
  - {target: "10.0.0.2:80", weight: 100}
  - {target: "10.0.0.3:80", weight: 200}
`)
	const keys = 20000
	owner := make([]string, keys)
	got := map[string]int{}
	for i := range keys {
		k := fmt.Sprintf("user-%d", i)
		owner[i] = b.pick(k, nil).addr
		for range 3 {
			if again := b.pick(k, nil).addr; again != owner[i] {
				t.Fatalf("key %s moved from %s to %s", k, owner[i], again)
			}
		}
		got[owner[i]]++
	}
	// Shares follow the weights (1/4, 1/4, 1/2) within 5 points.
	for addr, share := range map[string]float64{"10.0.0.1:80": .25, "10.0.0.2:80": .25, "10.0.0.3:80": .5} {
		if f := float64(got[addr]) / keys; f < share-.05 || f > share+.05 {
			t.Errorf("%s got %.3f of the keys, want %.2f ± 0.05 (%v)", addr, f, share, got)
		}
	}
	// A target going unhealthy moves only its own keys.
	b.targets[0].healthy.Store(false)
	for i := range keys {
		now := b.pick(fmt.Sprintf("user-%d", i), nil).addr
		if owner[i] != "10.0.0.1:80" && now != owner[i] {
			t.Fatalf("key %d moved from healthy %s to %s", i, owner[i], now)
		}
		if now == "10.0.0.1:80" {
			t.Fatal("picked the unhealthy target")
		}
	}
}

func TestLeastConnectionsAndLatency(t *testing.T) {
	b := testBalancer(t, `- name: u
  algorithm: least-connections
  targets:
  - {target: "10.0.0.1:80", weight: 100}
  - {target: "10.0.0.2:80", weight: 100}
`)
	b.targets[0].active.Store(5)
	for range 10 {
		if p := b.pick("", nil); p.addr != "10.0.0.2:80" {
			t.Fatalf("least-connections picked the busy target")
		}
	}
	b.targets[1].active.Store(5)
	got := map[string]int{}
	for range 10 {
		got[b.pick("", nil).addr]++
	}
	if got["10.0.0.1:80"] != 5 || got["10.0.0.2:80"] != 5 {
		t.Errorf("ties should alternate: %v", got)
	}
	l := testBalancer(t, `- name: u
  algorithm: latency
  targets:
  - {target: "10.0.0.1:80"}
  - {target: "10.0.0.2:80"}
`)
	l.targets[0].observeLatency(50 * time.Millisecond)
	l.targets[1].observeLatency(5 * time.Millisecond)
	for range 10 {
		if p := l.pick("", nil); p.addr != "10.0.0.2:80" {
			t.Fatal("latency picked the slow target")
		}
	}
}

func TestHealthCounting(t *testing.T) {
	tg := &target{}
	tg.healthy.Store(true)
	h := kongconf.HealthyRule{Successes: 2}
	u := kongconf.UnhealthyRule{TCPFailures: 2, HTTPFailures: 3}
	steps := []struct {
		o    outcome
		want bool
	}{
		{outcomeTCPFailure, true}, {outcomeSuccess, true}, {outcomeTCPFailure, true}, // reset by the success
		{outcomeTCPFailure, false},
		{outcomeSuccess, false}, {outcomeHTTPFailure, false}, {outcomeSuccess, false}, {outcomeSuccess, true},
		{outcomeHTTPFailure, true}, {outcomeHTTPFailure, true}, {outcomeNone, true}, {outcomeHTTPFailure, false},
	}
	for i, s := range steps {
		tg.report(byPassive, s.o, h, u)
		if got := tg.healthy.Load(); got != s.want {
			t.Fatalf("step %d: healthy %v, want %v", i, got, s.want)
		}
	}
}

// idServer is a real upstream on its own socket answering with its name;
// kill stops it at once (connections included) and restart listens on
// the same address again.
type idServer struct {
	name string
	addr string
	srv  *http.Server
	hits atomic.Int64
	mu   sync.Mutex
}

func newIDServer(t *testing.T, name string) *idServer {
	t.Helper()
	s := &idServer{name: name}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.kill)
	return s
}

func (s *idServer) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("X-Served-By", s.name)
		w.Header().Set("X-Seen-Host", r.Host)
		if r.URL.Path == "/status" {
			w.WriteHeader(200)
			return
		}
		_, _ = io.WriteString(w, s.name)
	})}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (s *idServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.srv.Close()
}

func (s *idServer) restart(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatalf("listening on %s again: %v", s.addr, err)
	}
	s.serve(ln)
}

// manualTickers hands out tickers that tick when the test says.
type manualTickers struct {
	mu sync.Mutex
	by map[time.Duration]chan time.Time
}

type manualTicker struct{ c chan time.Time }

func (m manualTicker) C() <-chan time.Time { return m.c }
func (m manualTicker) Stop()               {}

func (m *manualTickers) new(d time.Duration) Ticker {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = map[time.Duration]chan time.Time{}
	}
	c := make(chan time.Time)
	m.by[d] = c
	return manualTicker{c}
}

// tick fires the ticker of interval d once (the checker takes it when it
// is waiting for it).
func (m *manualTickers) tick(t *testing.T, d time.Duration) {
	t.Helper()
	m.mu.Lock()
	c := m.by[d]
	m.mu.Unlock()
	if c == nil {
		t.Fatalf("no health-check ticker of %v", d)
	}
	select {
	case c <- time.Time{}:
	case <-time.After(10 * time.Second):
		t.Fatalf("the health checker of %v did not take its tick", d)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func targetHealthy(g *Gateway, addr string) bool {
	for _, b := range g.gen.Load().balancers {
		for _, tg := range b.targets {
			if tg.addr == addr {
				return tg.healthy.Load()
			}
		}
	}
	return false
}

func upstreamsConfig(upstream string, servers ...*idServer) string {
	var b strings.Builder
	b.WriteString(`_format_version: "3.0"
services:
- name: s
  host: backend.internal
  retries: 3
  routes:
  - name: r
    paths: ["/"]
upstreams:
- name: backend.internal
`)
	b.WriteString(upstream)
	b.WriteString("  targets:\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "  - target: %s\n", s.addr)
	}
	return b.String()
}

func get(t *testing.T, cl *http.Client, url string, hdr map[string]string) (*http.Response, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := cl.Do(req)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body), err
}

// load runs requests from several clients until stop, counting the
// responses that are not 200.
func load(t *testing.T, base string, stop <-chan struct{}) (wait func() (ok, failed int64, firstErr string)) {
	var okN, failN atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			cl := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, body, err := get(t, cl, base+"/", nil)
				if err != nil || res.StatusCode != 200 {
					failN.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("%v %v %s", err, res, body))
					continue
				}
				okN.Add(1)
			}
		})
	}
	return func() (int64, int64, string) {
		wg.Wait()
		s, _ := first.Load().(string)
		return okN.Load(), failN.Load(), s
	}
}

// TestUpstreamTargetKilledUnderLoad: three real upstreams, one killed
// while requests flow: none fails (retries go to other targets), the
// active check takes the dead one out, and brings it back once restored.
func TestUpstreamTargetKilledUnderLoad(t *testing.T) {
	a, b, c := newIDServer(t, "a"), newIDServer(t, "b"), newIDServer(t, "c")
	var tickers manualTickers
	cfg := upstreamsConfig(`  healthchecks:
    active:
      http_path: /status
      timeout: 2
      healthy: {interval: 5, successes: 1}
      unhealthy: {interval: 7, tcp_failures: 1, http_failures: 1, timeouts: 1}
`, a, b, c)
	g, base := startGateway(t, cfg, Options{HealthCheckTicker: tickers.new})
	stop := make(chan struct{})
	wait := load(t, base, stop)
	waitFor(t, "traffic on every target", func() bool { return a.hits.Load() > 20 && b.hits.Load() > 20 && c.hits.Load() > 20 })
	b.kill()
	before := b.hits.Load()
	tickers.tick(t, 5*time.Second) // probe the healthy targets: b fails
	waitFor(t, "b marked unhealthy", func() bool { return !targetHealthy(g, b.addr) })
	aHits := a.hits.Load()
	waitFor(t, "traffic after b went away", func() bool { return a.hits.Load() > aHits+50 })
	b.restart(t)
	tickers.tick(t, 7*time.Second) // probe the unhealthy targets: b answers
	waitFor(t, "b healthy again", func() bool { return targetHealthy(g, b.addr) })
	waitFor(t, "traffic on b again", func() bool { return b.hits.Load() > before+20 })
	close(stop)
	ok, failed, first := wait()
	if failed > 0 {
		t.Errorf("%d of %d requests failed although retries cover one dead target; first: %s", failed, ok+failed, first)
	}
	if !targetHealthy(g, a.addr) || !targetHealthy(g, c.addr) {
		t.Error("a healthy target was taken out")
	}
}

// TestPassiveHealthCheck: proxied traffic alone takes a dead target out.
func TestPassiveHealthCheck(t *testing.T) {
	a, b := newIDServer(t, "a"), newIDServer(t, "b")
	cfg := upstreamsConfig(`  healthchecks:
    passive:
      unhealthy: {tcp_failures: 1, http_statuses: [500], http_failures: 2}
`, a, b)
	g, base := startGateway(t, cfg, Options{})
	b.kill()
	cl := &http.Client{Timeout: 10 * time.Second}
	for i := range 20 {
		res, body, err := get(t, cl, base+"/", nil)
		if err != nil || res.StatusCode != 200 || body != "a" {
			t.Fatalf("request %d: %v %v %q", i, err, res, body)
		}
	}
	if targetHealthy(g, b.addr) {
		t.Error("the dead target is still healthy after proxied connection failures")
	}
	a.kill()
	res, body, err := get(t, cl, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 502 && res.StatusCode != 503 {
		t.Errorf("every target dead: %d %s", res.StatusCode, body)
	}
	res, body, _ = get(t, cl, base+"/", nil)
	if res.StatusCode != 503 || !strings.Contains(body, "failure to get a peer from the ring-balancer") {
		t.Errorf("no healthy target: %d %s, want 503 failure to get a peer from the ring-balancer", res.StatusCode, body)
	}
}

func TestConsistentHashingEndToEnd(t *testing.T) {
	s := []*idServer{newIDServer(t, "a"), newIDServer(t, "b"), newIDServer(t, "c")}
	cl := &http.Client{Timeout: 10 * time.Second}
	t.Run("header", func(t *testing.T) {
		_, base := startGateway(t, upstreamsConfig("  algorithm: consistent-hashing\n  hash_on: header\n  hash_on_header: X-User\n  host_header: api.example.test\n", s...), Options{})
		seen := map[string]bool{}
		for i := range 30 {
			user := fmt.Sprintf("u%d", i)
			_, first, err := get(t, cl, base+"/", map[string]string{"X-User": user})
			if err != nil {
				t.Fatal(err)
			}
			seen[first] = true
			for range 3 {
				res, again, _ := get(t, cl, base+"/", map[string]string{"X-User": user})
				if again != first {
					t.Fatalf("user %s went to %s then %s", user, first, again)
				}
				if h := res.Header.Get("X-Seen-Host"); h != "api.example.test" {
					t.Fatalf("upstream saw Host %q, want the host_header", h)
				}
			}
		}
		if len(seen) < 2 {
			t.Errorf("30 users all went to %v", seen)
		}
	})
	t.Run("cookie", func(t *testing.T) {
		_, base := startGateway(t, upstreamsConfig("  algorithm: consistent-hashing\n  hash_on: cookie\n  hash_on_cookie: sticky\n  hash_on_cookie_path: /app\n", s...), Options{})
		res, first, err := get(t, cl, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		sc := res.Header.Get("Set-Cookie")
		if !strings.HasPrefix(sc, "sticky=") || !strings.Contains(sc, "path=/app") || !strings.Contains(strings.ToLower(sc), "httponly") {
			t.Fatalf("Set-Cookie %q, want sticky=...; path=/app; HttpOnly", sc)
		}
		cookie := strings.SplitN(sc, ";", 2)[0]
		for range 5 {
			res, again, _ := get(t, cl, base+"/", map[string]string{"Cookie": cookie})
			if again != first || res.Header.Get("Set-Cookie") != "" {
				t.Fatalf("with the cookie: served by %s (first %s), Set-Cookie %q", again, first, res.Header.Get("Set-Cookie"))
			}
		}
	})
	t.Run("query_arg then path", func(t *testing.T) {
		_, base := startGateway(t, upstreamsConfig("  algorithm: consistent-hashing\n  hash_on: query_arg\n  hash_on_query_arg: tenant\n  hash_fallback: path\n", s...), Options{})
		seen := map[string]bool{}
		for i := range 30 {
			for _, u := range []string{fmt.Sprintf("/x?tenant=t%d", i), fmt.Sprintf("/p%d", i)} {
				_, first, err := get(t, cl, base+u, nil)
				if err != nil {
					t.Fatal(err)
				}
				seen[first] = true
				for range 3 {
					if _, again, _ := get(t, cl, base+u, nil); again != first {
						t.Fatalf("%s went to %s then %s", u, first, again)
					}
				}
			}
		}
		if len(seen) < 2 {
			t.Errorf("60 keys all went to %v", seen)
		}
	})
	t.Run("target host header", func(t *testing.T) {
		_, base := startGateway(t, upstreamsConfig("", s[0]), Options{})
		res, _, err := get(t, cl, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if h := res.Header.Get("X-Seen-Host"); h != s[0].addr {
			t.Errorf("upstream saw Host %q, want the target %s", h, s[0].addr)
		}
	})
}

// TestUpstreamRetriesBound: with every target dead, a request is tried
// retries+1 times and then fails.
func TestUpstreamRetriesBound(t *testing.T) {
	var dead []*idServer
	for i := range 6 {
		s := newIDServer(t, fmt.Sprint(i))
		s.kill()
		dead = append(dead, s)
	}
	_, base := startGateway(t, upstreamsConfig("", dead...), Options{})
	res, body, err := get(t, &http.Client{Timeout: 10 * time.Second}, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 502 {
		t.Errorf("every target dead: %d %s, want 502", res.StatusCode, body)
	}
}

// TestHTTPSTargetsAndTCPChecks: an https service balanced over TLS
// targets, probed by tcp checks: a killed target is taken out and a
// restored one brought back.
func TestHTTPSTargetsAndTCPChecks(t *testing.T) {
	var servers []*httptest.Server
	for _, name := range []string{"a", "b"} {
		s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		servers = append(servers, s)
	}
	addrOf := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "https://") }
	var tickers manualTickers
	cfg := fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  host: tls.backend
  protocol: https
  tls_verify: false
  routes: [{name: r, paths: ["/"]}]
upstreams:
- name: tls.backend
  healthchecks:
    active:
      type: tcp
      healthy: {interval: 3, successes: 1}
      unhealthy: {interval: 4, tcp_failures: 1}
  targets: [{target: "%s"}, {target: "%s"}]
`, addrOf(servers[0]), addrOf(servers[1]))
	g, base := startGateway(t, cfg, Options{HealthCheckTicker: tickers.new})
	cl := &http.Client{Timeout: 10 * time.Second}
	got := map[string]int{}
	for range 10 {
		_, body, err := get(t, cl, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		got[body]++
	}
	if got["a"] != 5 || got["b"] != 5 {
		t.Fatalf("round-robin over TLS targets: %v", got)
	}
	// Take b away: close its listener so that connections are refused.
	bAddr := addrOf(servers[1])
	servers[1].Listener.Close()
	servers[1].CloseClientConnections()
	tickers.tick(t, 3*time.Second)
	waitFor(t, "b unhealthy", func() bool { return !targetHealthy(g, bAddr) })
	for range 5 {
		if _, body, err := get(t, cl, base+"/", nil); err != nil || body != "a" {
			t.Fatalf("with b down: %q %v", body, err)
		}
	}
	ln, err := net.Listen("tcp", bAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	tickers.tick(t, 4*time.Second)
	waitFor(t, "b healthy again (a tcp check only connects)", func() bool { return targetHealthy(g, bAddr) })
}
