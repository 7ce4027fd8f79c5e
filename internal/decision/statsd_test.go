package decision

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

// until reads lines up to and including last and returns those before it
// that start with prefix. Lines of one flush arrive in the order sent.
func (l *udpListener) until(t *testing.T, prefix, last string) []string {
	t.Helper()
	var got []string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line := <-l.lines:
			if line == last {
				return got
			}
			if strings.HasPrefix(line, prefix) {
				got = append(got, line)
			}
		case <-deadline:
			t.Fatalf("statsd line %q missing; got %q before it", last, got)
		}
	}
}

// Each unary gRPC call, ShouldRateLimit's and the health check's, is one
// timer line, as the peer's interceptor sends it: whole milliseconds, type
// ms, sent once.
func TestStatsdResponseTime(t *testing.T) {
	l := listenUDP(t)
	s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
	c, conn := serveGRPC(t, s)
	health := healthpb.NewHealthClient(conn)
	for range 3 {
		call(t, c, request("shop", desc("plain", "x")))
	}
	for range 2 {
		if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil {
			t.Fatal(err)
		}
	}
	sink, err := s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	line := regexp.MustCompile(`^ratelimit_server\.(\w+)\.response_time:(\d+)\|ms$`)
	check := func(want map[string]int, last string) []string {
		t.Helper()
		if err := sink.Flush(); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		lines := l.until(t, "ratelimit_server.", last)
		for _, g := range lines {
			if !strings.HasSuffix(g, "|ms") {
				continue
			}
			m := line.FindStringSubmatch(g)
			if m == nil {
				t.Fatalf("timer line %q", g)
			}
			got[m[1]]++
			// Each call was answered within call's 10 s deadline.
			if ms, _ := strconv.Atoi(m[2]); ms > 10000 {
				t.Errorf("response time %d ms", ms)
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("timer lines by method %v, want %v: %q", got, want, lines)
		}
		return lines
	}
	if lines := check(map[string]int{"ShouldRateLimit": 3, "Check": 2}, "ratelimit_server.ShouldRateLimit.total_requests:3|c"); !slices.Contains(lines, "ratelimit_server.Check.total_requests:2|c") {
		t.Errorf("no Check counter in %q", lines)
	}
	if got := s.PeerStats(); !slices.Contains(got, PeerStat{Name: "ratelimit_server.Check.total_requests", Value: 2}) {
		t.Errorf("PeerStats: %v", got)
	}
	call(t, c, request("shop", desc("plain", "x")))
	check(map[string]int{"ShouldRateLimit": 1}, "ratelimit_server.ShouldRateLimit.total_requests:1|c")
}

// Durations are sent in whole milliseconds, truncated, one line per call;
// DogStatsD's client writes them with six decimals and the tags.
func TestStatsdTimerValues(t *testing.T) {
	for _, dog := range []bool{false, true} {
		l := listenUDP(t)
		s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
		opts := StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour}
		suffix, tags := "|ms", ""
		if dog {
			opts.Dogstatsd, opts.Tags = true, map[string]string{"env": "test"}
			suffix, tags = ".000000|ms", "|#env:test"
		}
		sink, err := s.StartStatsd(opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []time.Duration{999 * time.Microsecond, 0, 12*time.Millisecond + 900*time.Microsecond, 2500 * time.Millisecond, -time.Millisecond} {
			s.peer.responseTime.add(d)
		}
		s.peer.requests.Add(5)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		got := l.until(t, responseTimeName, "ratelimit_server.ShouldRateLimit.total_requests:5|c"+tags)
		want := []string{"0", "0", "0", "12", "2500"}
		for i := range want {
			want[i] = responseTimeName + ":" + want[i] + suffix + tags
		}
		if !slices.Equal(got, want) {
			t.Errorf("dogstatsd %v:\ngot  %q\nwant %q", dog, got, want)
		}
	}
}

// Mogrifiers rename and tag statistics as envoyproxy/ratelimit's README
// example does (its HITS mogrifier), the first match winning; the tags
// follow EXTRA_TAGS; a statistic no pattern matches is sent as named.
func TestDogstatsdMogrifiers(t *testing.T) {
	l := listenUDP(t)
	s := newService(t, peerFields, newClock(t0).optsWith(Options{PeerStats: true}))
	for _, r := range []*rlspb.RateLimitRequest{request("shop", desc("plain", "x")), request("shop", desc("tenant", "acme", "plan", "gold"))} {
		if _, err := s.Decide(context.Background(), r, t0); err != nil {
			t.Fatal(err)
		}
	}
	s.peer.responseTime.add(12 * time.Millisecond)
	s.peer.requests.Add(1)
	sink, err := s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour, Dogstatsd: true,
		Tags: map[string]string{"env": "test"},
		Mogrifiers: []Mogrifier{
			{Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.(shop)\.plain\.within_limit$`), Name: "$1.plain_ok.$9"},
			{Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`), Name: "ratelimit.service.rate_limit.$3",
				Tags: map[string]string{"domain": "$1", "descriptor": "$2"}},
			{Pattern: regexp.MustCompile(`server\.(\w+)\.response`), Name: "rls.$0", Tags: map[string]string{"method": "$1"}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	got := l.collect(t,
		"ratelimit.service.rate_limit.total_hits:1|c|#env:test,descriptor:plain,domain:shop",
		"ratelimit.service.rate_limit.total_hits:1|c|#env:test,descriptor:tenant_acme.plan_gold,domain:shop",
		"ratelimit.service.rate_limit.within_limit:1|c|#env:test,descriptor:tenant_acme.plan_gold,domain:shop",
		"shop.plain_ok.$9:1|c|#env:test",
		"rls.server.ShouldRateLimit.response:12.000000|ms|#env:test,method:ShouldRateLimit",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c|#env:test",
	)
	for line := range got {
		if strings.HasPrefix(line, "ratelimit.service.rate_limit.shop.") {
			t.Errorf("not mogrified: %q", line)
		}
	}
	if _, err := s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Mogrifiers: []Mogrifier{{Pattern: regexp.MustCompile(`.`)}}}); err == nil {
		t.Error("mogrifiers without DogStatsD")
	}
}

func TestExpandGroups(t *testing.T) {
	match := []string{"a.b", "a", "b", ""}
	for tmpl, want := range map[string]string{
		"":                      "",
		"x.$1":                  "x.a",
		"$0":                    "a.b",
		"$1a":                   "aa",
		"${1}":                  "${1}",
		"$$1":                   "$a",
		"$3.$2":                 ".b",
		"$4 $10 $":              "$4 $10 $",
		"$01":                   "a",
		"$99999999999999999999": "$99999999999999999999",
	} {
		if got := expandGroups(tmpl, match); got != want {
			t.Errorf("expandGroups(%q) = %q, want %q", tmpl, got, want)
		}
	}
}
