package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// rawExchange sends raw bytes and returns the status line's code (0 when
// the server closed without answering) and the body, reading at most
// until deadline.
func rawExchange(t *testing.T, addr, raw string, wait time.Duration) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// hostileCases are requests found by hostile-input probes, with nginx's
// status (Kong's data plane, proxy_pass to the same upstream) and
// sluice's status and Kong message. Where the two differ it is on
// purpose, and docs/gateway.md says so: bare LF line endings, which nginx
// accepts, are refused.
var hostileCases = []struct {
	name, raw  string
	nginx      int
	status     int
	message    string
	reason     string // sluice_client_errors_total's
	sameAsNgnx bool
}{
	{"ok", "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, 200, "", "", true},
	{"h2c upgrade is proxied, not tunnelled", "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", 200, 200, "", "", true},
	{"header line of 5k", "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\nConnection: close\r\n\r\n", 200, 200, "", "", true},
	{"header line of 9k", "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\nConnection: close\r\n\r\n", 400, 400, "Request header or cookie too large", clientHeaderTooBig, true},
	{"header block of 42k", "GET /ok HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Many: "+strings.Repeat("b", 7000)+"\r\n", 6) + "Connection: close\r\n\r\n", 400, 400, "Request header or cookie too large", clientHeaderTooBig, true},
	{"request line of 9k", "GET /ok?" + strings.Repeat("q", 9000) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414, 414, "URI too long", clientURITooLong, true},
	{"huge chunk size", "POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nffffffffffffffffff\r\nabc\r\n0\r\n\r\n", 400, 400, "Bad request", clientBadBody, true},
	{"chunks with bare LF", "POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\nabc\n0\n\n", 200, 400, "Bad request", clientBadBody, false},
	{"header name with a space", "GET /ok HTTP/1.1\r\nHost: x\r\nBad Name: v\r\nConnection: close\r\n\r\n", 400, 400, "Bad request", clientBadHeaderName, true},
	{"HTTP/9.9", "GET /ok HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n", 505, 505, "HTTP version not supported", clientVersion, true},
	{"HTTP/2.0 on an HTTP/1 port", "GET /ok HTTP/2.0\r\nHost: x\r\nConnection: close\r\n\r\n", 505, 505, "HTTP version not supported", clientVersion, true},
	{"HTTP/1.2", "GET /ok HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n", 200, 200, "", "", true},
	{"TRACE", "TRACE /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405, 405, "Method not allowed", clientMethod, true},
	{"bare LF request", "GET /ok HTTP/1.1\nHost: x\nConnection: close\n\n", 200, 400, "Bad request", clientBareLF, false},
}

// TestHostileRequests sends each hostile case over raw TCP to the real
// gateway and to a real nginx proxying to the same upstream.
func TestHostileRequests(t *testing.T) {
	up := echoUpstream(t)
	ng := testservers.Nginx(t, "", "location / { proxy_pass "+up.URL+"; proxy_http_version 1.1; }")
	g, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{name: r, paths: [/]}]}]
`, up), Options{})
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			before := 0.0
			if c.reason != "" {
				before = counterValue(g.metrics.clientErrors.WithLabelValues(c.reason))
			}
			ns, nb := rawExchange(t, strings.TrimPrefix(ng.URL(), "http://"), c.raw, 10*time.Second)
			if ns != c.nginx {
				t.Errorf("nginx answered %d, want %d: %.200s", ns, c.nginx, nb)
			}
			st, body := rawExchange(t, strings.TrimPrefix(base, "http://"), c.raw, 10*time.Second)
			if st != c.status {
				t.Fatalf("sluice answered %d, want %d: %.200s", st, c.status, body)
			}
			if c.sameAsNgnx && st != ns {
				t.Errorf("sluice %d, nginx %d", st, ns)
			}
			if c.message != "" && !strings.HasPrefix(body, `{"message":"`+c.message+`"`) {
				t.Errorf("body %.200s, want Kong's message %q", body, c.message)
			}
			if c.reason != "" {
				if got := counterValue(g.metrics.clientErrors.WithLabelValues(c.reason)) - before; got != 1 {
					t.Errorf("sluice_client_errors_total{reason=%q} grew by %v, want 1", c.reason, got)
				}
			}
			if c.status == 200 && st == 200 {
				var e echoed
				if err := json.Unmarshal([]byte(body), &e); err != nil {
					t.Fatalf("%.200s: %v", body, err)
				}
				if e.Headers["upgrade"] != "" || e.Headers["http2-settings"] != "" {
					t.Errorf("an Upgrade other than websocket reached the upstream: %v", e.Headers)
				}
			}
		})
	}
	if n := counterValue(g.metrics.upstreamErrors.WithLabelValues("s", "connect")); n != 0 {
		t.Errorf("client mistakes counted as %v upstream connect errors", n)
	}
}

// TestHeaderBuffers: Options.HeaderBuffers (large_client_header_buffers)
// moves the limits.
func TestHeaderBuffers(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{name: r, paths: [/]}]}]
`, up), Options{HeaderBuffers: HeaderBuffers{Number: 2, Size: 2048}})
	addr := strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		name, raw string
		status    int
	}{
		{"1.5k line", "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 1500) + "\r\nConnection: close\r\n\r\n", 200},
		{"3k line", "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 3000) + "\r\nConnection: close\r\n\r\n", 400},
		{"3k request line", "GET /?" + strings.Repeat("q", 3000) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414},
		{"block of 6k", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-B: "+strings.Repeat("b", 1500)+"\r\n", 4) + "Connection: close\r\n\r\n", 400},
	} {
		if st, body := rawExchange(t, addr, c.raw, 10*time.Second); st != c.status {
			t.Errorf("%s: %d, want %d: %.200s", c.name, st, c.status, body)
		}
	}
	for _, s := range []string{"4 8k", "8 24k", "2 1m", "1 1024"} {
		if _, err := ParseHeaderBuffers(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "4", "0 8k", "4 8x", "4 512", "a 8k"} {
		if _, err := ParseHeaderBuffers(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// TestTunnelOnlyWhenUpgraded: a WebSocket request the upstream does not
// upgrade gets that answer and nothing more of the connection reaches the
// upstream; an h2c upgrade is never tunnelled, even to an upstream that
// would switch protocols.
func TestTunnelOnlyWhenUpgraded(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		if r.Header.Get("Upgrade") != "" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "+r.Header.Get("Upgrade")+"\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(c, brw) // echo raw bytes
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "plain "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - {name: open, paths: [/open], strip_path: false}
      - name: closed
        paths: [/closed]
        strip_path: false
        plugins: [{name: request-termination, config: {status_code: 403, message: closed}}]
`, up), Options{})
	addr := strings.TrimPrefix(base, "http://")

	// h2c: proxied as a plain request; the upstream sees no Upgrade.
	st, body := rawExchange(t, addr, "GET /open/h2c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", 10*time.Second)
	if st != 200 || body != "plain /open/h2c" {
		t.Errorf("h2c: %d %q, want the plain answer", st, body)
	}

	// A WebSocket upgrade the upstream does not grant (it answers 200 to a
	// request without Upgrade... here: to "Upgrade: websocket" on a path
	// it refuses) is one exchange; a request written behind it on the same
	// connection is not sent to the upstream unrouted.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "refuse"+r.URL.Path)
		mu.Unlock()
		http.Error(w, "no websocket here", http.StatusBadRequest)
	}))
	t.Cleanup(refuse.Close)
	_, base2 := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - {name: open, paths: [/open], strip_path: false}
      - name: closed
        paths: [/closed]
        strip_path: false
        plugins: [{name: request-termination, config: {status_code: 403, message: closed}}]
`, refuse), Options{})
	c, err := net.Dial("tcp", strings.TrimPrefix(base2, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /open/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"+
		"GET /closed/secret HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 400 || !strings.Contains(string(b), "no websocket here") {
		t.Errorf("refused upgrade: %d %q", res.StatusCode, b)
	}
	if res2, err := http.ReadResponse(br, nil); err == nil {
		b, _ := io.ReadAll(res2.Body)
		if res2.StatusCode != 403 {
			t.Errorf("the request behind a refused upgrade: %d %q, want 403 or a closed connection", res2.StatusCode, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range seen {
		if strings.Contains(p, "secret") {
			t.Errorf("the upstream saw %q, which the route refuses", p)
		}
	}
}
