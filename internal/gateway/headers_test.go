package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestCanonicalHeaderNames(t *testing.T) {
	for _, k := range canonicalHeaderChecks {
		if n := fasthttp.AppendNormalizedHeaderKey(nil, string(k)); string(n) != string(k) {
			t.Errorf("%q is not canonical: fasthttp normalizes it to %q", k, n)
		}
	}
}

// hopCases are header blocks with and without hop-by-hop headers, in
// several cases and orders.
var hopCases = []string{
	"Host: a\r\nX-A: 1\r\n",
	"Host: a\r\nConnection: close\r\nX-A: 1\r\n",
	"Host: a\r\nconnection: keep-alive\r\nX-A: 1\r\nkeep-alive: timeout=5\r\nX-B: 2\r\n",
	"Host: a\r\nConnection: X-A, x-b , Upgrade\r\nX-A: 1\r\nUpgrade: websocket\r\nX-B: 2\r\nX-C: 3\r\n",
	"Host: a\r\nTE: trailers\r\nX-A: 1\r\nProxy-Authorization: Basic x\r\nX-B: 2\r\nPROXY-CONNECTION: keep-alive\r\nX-C: 3\r\n",
	"Host: a\r\nProxy-Authenticate: Basic\r\nX-A: 1\r\nX-B: 2\r\nTrailer: X-T\r\nX-C: 3\r\n",
	"Host: a\r\nConnection: Content-Type\r\nContent-Type: text/plain\r\nX-A: 1\r\n",
	"Host: a\r\nConnection: close, X-A\r\nX-A: 1\r\nX-A: 2\r\nX-B: 2\r\n",
}

// TestDelHopHeadersRequest checks that deleting only the hop-by-hop headers
// found by the scan leaves the same headers, in the same order, as
// deleting every name (the code this replaced).
func TestDelHopHeadersRequest(t *testing.T) {
	for _, c := range hopCases {
		for _, body := range []string{"", "Content-Length: 0\r\n", "Transfer-Encoding: chunked\r\n"} {
			raw := "GET / HTTP/1.1\r\n" + c + body + "\r\n"
			var want, got fasthttp.RequestHeader
			if err := want.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatalf("%q: %v", raw, err)
			}
			want.CopyTo(&got)
			delEveryHop(&want)
			delHopHeaders(&got, requestHops(&got))
			if w, g := want.String(), got.String(); w != g {
				t.Errorf("%q:\ngot  %q\nwant %q", raw, g, w)
			}
		}
	}
}

func TestDelHopHeadersResponse(t *testing.T) {
	for _, c := range hopCases {
		for _, body := range []string{"Content-Length: 0\r\n", "Transfer-Encoding: chunked\r\n"} {
			raw := "HTTP/1.1 200 OK\r\n" + c + body + "\r\n"
			var want, got fasthttp.ResponseHeader
			if err := want.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatalf("%q: %v", raw, err)
			}
			want.CopyTo(&got)
			delEveryHop(&want)
			hops, _ := responseHops(&got, nil)
			delHopHeaders(&got, hops)
			if w, g := want.String(), got.String(); w != g {
				t.Errorf("%q:\ngot  %q\nwant %q", raw, g, w)
			}
		}
	}
}

// delEveryHop deletes from h the headers its Connection header names and
// every hop-by-hop header, one name at a time: what delHopHeaders must
// match.
func delEveryHop(h interface {
	Peek(string) []byte
	Del(string)
}) {
	for _, name := range connectionTokens(h.Peek("Connection")) {
		h.Del(name)
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func TestHopIndex(t *testing.T) {
	for i, h := range hopHeaders {
		for _, name := range []string{h, strings.ToLower(h), strings.ToUpper(h)} {
			if got := hopIndex([]byte(name)); got != i {
				t.Errorf("hopIndex(%q) = %d, want %d", name, got, i)
			}
		}
	}
	for _, name := range []string{"", "T", "Tx", "Connectio", "Connections", "Keep-Alivf", "X-Upgrade", "Proxy-Authorizatio", "Content-Type", "Host"} {
		if got := hopIndex([]byte(name)); got != -1 {
			t.Errorf("hopIndex(%q) = %d, want -1", name, got)
		}
	}
}

func TestEqualFoldASCII(t *testing.T) {
	for _, c := range []struct {
		b, s string
		want bool
	}{
		{"Connection", "connection", true},
		{"TE", "te", true},
		{"Te", "TE", true},
		{"Upgrade", "Upgrad", false},
		{"X-A", "x-a", true},
		{"[", "{", false}, // differ by 0x20 but are not letters
		{"@", "`", false},
	} {
		if got := equalFoldASCII([]byte(c.b), c.s); got != c.want {
			t.Errorf("equalFoldASCII(%q, %q) = %v", c.b, c.s, got)
		}
	}
}

// TestPluginHeadersAsKong: the rate-limiting headers go on the wire
// spelled as Kong spells them (RLA's code: "X-RateLimit-Limit-minute",
// docs/kong-compatibility.md), not as fasthttp would ("X-Ratelimit-Limit-Minute"), and they
// replace the upstream's headers of the same names (any case), as
// kong.response.set_header does; the upstream's other headers pass.
func TestPluginHeadersAsKong(t *testing.T) {
	base := gatewayWithPlugins(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["x-ratelimit-limit-minute"] = []string{"999"}
		w.Header()["RATELIMIT-LIMIT"] = []string{"998", "997"}
		w.Header().Set("X-Upstream-Limit", "1")
		fmt.Fprint(w, "ok")
	}, `
  - name: rate-limiting-advanced
    config: {limit: [5], window_size: [60], window_type: fixed, sync_rate: -1}
`)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
	var names []string
	values := map[string][]string{}
	for _, line := range strings.Split(head, "\r\n")[1:] {
		k, v, _ := strings.Cut(line, ": ")
		names = append(names, k)
		values[strings.ToLower(k)] = append(values[strings.ToLower(k)], v)
	}
	for _, want := range []string{"X-RateLimit-Limit-minute", "X-RateLimit-Remaining-minute", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %q among the response's header names %q", want, names)
		}
	}
	for name, want := range map[string]string{
		"x-ratelimit-limit-minute": "5", "ratelimit-limit": "5", "x-ratelimit-remaining-minute": "4", "x-upstream-limit": "1",
	} {
		if got := values[name]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want just %q\n%s", name, got, want, head)
		}
	}
}

// Two plugins setting the same header in different spellings (the OSS
// plugin's X-RateLimit-Limit-Minute, RLA's X-RateLimit-Limit-minute) send
// it once, with the later plugin's value, as Kong's set_header does.
func TestPluginHeadersSetOncePerName(t *testing.T) {
	base := gatewayWithPlugins(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }, `
  - name: rate-limiting
    config: {minute: 5, policy: local}
  - name: rate-limiting-advanced
    config: {limit: [100], window_size: [60], window_type: fixed, sync_rate: -1}
`)
	r := do(t, "GET", base+"/", nil)
	if got := r.header.Values("X-Ratelimit-Limit-Minute"); len(got) != 1 {
		t.Fatalf("X-RateLimit-Limit-Minute in any case: %q, want one value", got)
	}
}

// gatewayWithPlugins serves one route to an upstream answering with h,
// with the global plugins listed in YAML, and returns the gateway's URL.
func gatewayWithPlugins(t *testing.T, h http.HandlerFunc, plugins string) string {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
plugins:`+plugins, up), Options{})
	return base
}
