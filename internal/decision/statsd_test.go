package decision

import (
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// udpListener collects statsd lines from a real UDP socket.
type udpListener struct {
	conn  *net.UDPConn
	lines chan string
}

func listenUDP(t *testing.T) *udpListener {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	l := &udpListener{conn: c, lines: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				close(l.lines)
				return
			}
			if n > maxDatagram {
				l.lines <- "OVERSIZED DATAGRAM"
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				l.lines <- line
			}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return l
}

// collect reads lines until every wanted one has arrived, within a bounded
// deadline, and returns all lines read.
func (l *udpListener) collect(t *testing.T, want ...string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	deadline := time.After(20 * time.Second)
	missing := func() []string {
		var m []string
		for _, w := range want {
			if !got[w] {
				m = append(m, w)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		select {
		case line := <-l.lines:
			got[line] = true
		case <-deadline:
			t.Fatalf("statsd lines missing: %q; got %v", missing(), got)
		}
	}
	return got
}

// The statistics reach a real UDP listener with envoyproxy/ratelimit's
// names and values; a second flush sends only what grew.
func TestStatsdDatagrams(t *testing.T) {
	l := listenUDP(t)
	s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
	c, _ := serveGRPC(t, s)
	for range 4 {
		call(t, c, request("shop", desc("plain", "x")))
	}
	sink, err := s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if err := sink.Flush(); err != nil {
		t.Fatal(err)
	}
	got := l.collect(t,
		"ratelimit.service.rate_limit.shop.plain.total_hits:4|c",
		"ratelimit.service.rate_limit.shop.plain.within_limit:3|c",
		"ratelimit.service.rate_limit.shop.plain.over_limit:1|c",
		"ratelimit.service.rate_limit.shop.plain.near_limit:1|c",
		"ratelimit_server.ShouldRateLimit.total_requests:4|c",
	)
	for line := range got {
		if strings.Contains(line, ":0|c") || line == "OVERSIZED DATAGRAM" {
			t.Errorf("sent %q", line)
		}
	}
	call(t, c, request("shop", desc("plain", "x")))
	call(t, c, request("shop", desc("tenant", "acme", "plan", "gold")))
	if err := sink.Flush(); err != nil {
		t.Fatal(err)
	}
	l.collect(t,
		"ratelimit.service.rate_limit.shop.plain.total_hits:1|c",
		"ratelimit.service.rate_limit.shop.plain.over_limit:1|c",
		"ratelimit.service.rate_limit.shop.tenant_acme.plan_gold.total_hits:1|c",
	)
}

func TestDogstatsdTags(t *testing.T) {
	l := listenUDP(t)
	s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
	c, _ := serveGRPC(t, s)
	call(t, c, request("shop", desc("plain", "x")))
	sink, err := s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour, Dogstatsd: true, Tags: map[string]string{"env": "test", "app": "rl"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil { // Close flushes
		t.Fatal(err)
	}
	l.collect(t, "ratelimit.service.rate_limit.shop.plain.total_hits:1|c|#app:rl,env:test")
	if _, err := newService(t, peerFields, Options{}).StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String()}); err == nil {
		t.Error("statsd without PeerStats")
	}
}

func TestDebugHandler(t *testing.T) {
	s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
	srv := httptest.NewServer(s.DebugHandler())
	defer srv.Close()
	c, _ := serveGRPC(t, s)
	call(t, c, request("shop", desc("plain", "x")))
	for path, want := range map[string]string{
		"/":             "/rlconfig: print out the currently loaded configuration",
		"/rlconfig":     "shop.path_files/*: unit=HOUR requests_per_unit=2 algorithm=fixed, shadow_mode: false, quota_mode: false\n",
		"/stats":        "ratelimit.service.rate_limit.shop.plain.total_hits: 1\n",
		"/debug/pprof/": "goroutine",
	} {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d\n%s\nwant %q", path, res.StatusCode, b, want)
		}
	}
}
