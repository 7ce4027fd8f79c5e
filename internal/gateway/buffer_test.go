package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestBufferedBodyKeepsUpstreamConnection: small bodies of known length
// are read whole before the response is sent (bufferBody); the upstream
// connection must still go back to the pool, so sequential requests use
// one upstream connection, and bodies on both sides of maxBufferedBody
// arrive whole.
func TestBufferedBodyKeepsUpstreamConnection(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		_, _ = fmt.Sscan(r.URL.Query().Get("n"), &n)
		w.Header().Set("Content-Length", fmt.Sprint(n))
		_, _ = w.Write([]byte(strings.Repeat("x", n)))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	_, base := startGateway(t, withUpstream(everyPathTo, up), Options{})

	for i, n := range []int{0, 1, 2, 4096, maxBufferedBody, maxBufferedBody + 1, 3, 0} {
		r := do(t, "GET", fmt.Sprintf("%s/?n=%d", base, n), nil)
		if r.status != 200 || len(r.body) != n || r.header.Get("Content-Length") != fmt.Sprint(n) {
			t.Fatalf("request %d (n=%d): status %d, %d bytes, Content-Length %q", i, n, r.status, len(r.body), r.header.Get("Content-Length"))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("upstream saw %d connections for sequential requests, want 1 (the gateway did not pool it)", n)
	}
}

// TestBufferedBodyUpstreamBreaks: an upstream that announces more than it
// sends before closing gives the client the bytes that arrived and a
// broken response, as streaming did, not a complete-looking one.
func TestBufferedBodyUpstreamBreaks(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
		_ = brw.Flush()
	}))
	t.Cleanup(up.Close)
	_, base := startGateway(t, withUpstream(everyPathTo, up), Options{})

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != 200 || res.ContentLength != 100 || string(b) != "partial" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("status %d, Content-Length %d, body %q, error %v; want 200, 100, the partial body and io.ErrUnexpectedEOF",
			res.StatusCode, res.ContentLength, b, err)
	}
}

// everyPathTo routes every path to the upstream withUpstream names.
const everyPathTo = `
_format_version: "3.0"
services:
  - name: svc
    url: UPSTREAM
    routes:
      - {name: r, paths: [/]}
`
