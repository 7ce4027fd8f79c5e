package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStreamingResponse checks that a long-poll response reaches the
// client before the upstream has finished it.
func TestStreamingResponse(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "first;")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "second")
	}))
	defer up.Close()
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up), Options{})
	res, err := http.Get(base + "/poll")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, len("first;"))
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "first;" {
		t.Fatalf("first part: %q %v", buf, err)
	}
	close(release) // only now may the upstream finish
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != "second" {
		t.Fatalf("rest: %q %v", rest, err)
	}
}

// TestLargeBodies streams a request body larger than the server's buffers
// to the upstream and a large response back, and rejects a body over the
// configured limit with 413.
func TestLargeBodies(t *testing.T) {
	const size = 8 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("X-Received", fmt.Sprint(n))
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < size/len(chunk); i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer up.Close()
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up), Options{MaxRequestBodySize: size + 1})
	res, err := http.Post(base+"/up", "application/octet-stream", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || n != size || res.Header.Get("X-Received") != fmt.Sprint(size) {
		t.Fatalf("status %d, got %d bytes back (%v), upstream received %s", res.StatusCode, n, err, res.Header.Get("X-Received"))
	}

	// Over the limit: a small limit, so the client's whole body fits in
	// the socket buffers and it reads the 413 instead of a reset.
	_, small := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up), Options{MaxRequestBodySize: 1024})
	res, err = http.Post(small+"/up", "application/octet-stream", bytes.NewReader(make([]byte, 4096)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 413 || !strings.Contains(string(b), "Request size limit exceeded") {
		t.Errorf("oversized body: %d %s, want 413", res.StatusCode, b)
	}
	// Without a Content-Length (chunked), fasthttp's limit cuts the stream.
	res, err = http.Post(small+"/up", "application/octet-stream", io.MultiReader(bytes.NewReader(make([]byte, 4096))))
	if err == nil {
		res.Body.Close()
		if res.StatusCode == 200 && res.Header.Get("X-Received") == "4096" {
			t.Errorf("oversized chunked body reached the upstream whole")
		}
	}
}

// TestWebSocketTunnel upgrades through the gateway and echoes bytes both
// ways over the tunnel.
func TestWebSocketTunnel(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || r.URL.Path != "/ws/chat" {
			http.Error(w, "not an upgrade to /ws/chat: "+r.URL.Path, 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(c, brw) // echo until the client closes
	}))
	defer up.Close()
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/ws], strip_path: false}]}]
`, up), Options{})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /ws/chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 101 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	for _, msg := range []string{"ping", "pong pong"} {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo: %q %v", buf, err)
		}
	}
}

// TestConcurrencyLeaseReleasedOnDisconnect holds the only lease with a
// streaming response, checks that a second request is refused, then
// drops the client and waits (bounded) until the slot is free again.
func TestConcurrencyLeaseReleasedOnDisconnect(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quick" {
			fmt.Fprint(w, "ok")
			return
		}
		chunk := bytes.Repeat([]byte("y"), 4096)
		// Stream until the gateway goes away (bounded in case it never does).
		for i := 0; i < 1<<16; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				return
			}
		}
	}))
	defer up.Close()
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM
    routes:
      - {name: stream, paths: [/stream], strip_path: false}
      - {name: quick, paths: [/quick], strip_path: false}
plugins:
  - name: sluice-concurrency
    config: {limit: 1, lease_ttl: 3600, namespace: c1}
`, up), Options{})

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/stream", nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("X-Concurrency-Remaining") != "0" {
		t.Fatalf("stream: %d %v", res.StatusCode, res.Header)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	r := do(t, "GET", base+"/quick", nil)
	if r.status != 429 || !strings.Contains(r.body, "Too many concurrent requests") || r.header.Get("Retry-After") == "" {
		t.Fatalf("second request while the lease is held: %d %s", r.status, r.body)
	}
	cancel() // the client goes away mid-stream
	res.Body.Close()

	deadline := time.Now().Add(10 * time.Second)
	for {
		r = do(t, "GET", base+"/quick", nil)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease not released after the client left: %d %s", r.status, r.body)
		}
		<-time.After(10 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// TestGracefulShutdownDrains starts a request, shuts down while it is in
// flight, and checks that it completes.
func TestGracefulShutdownDrains(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		fmt.Fprint(w, "done")
	}))
	defer up.Close()
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up)), "test"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	got := make(chan string, 1)
	go func() {
		res, err := http.Get("http://" + ln.Addr().String() + "/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got <- string(b)
	}()
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- g.Shutdown(ctx)
	}()
	close(release)
	if b := <-got; b != "done" {
		t.Errorf("in-flight request: %q", b)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestBodilessResponses: HEAD keeps the upstream's Content-Length, 204
// and 304 pass through without a body, and keep-alive survives them.
func TestBodilessResponses(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.Header().Set("ETag", `"x"`)
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "11")
			if r.Method != "HEAD" {
				fmt.Fprint(w, "hello world")
			}
		}
	}))
	defer up.Close()
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/], strip_path: false}]}]
`, up), Options{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		method, path string
		status       int
		length       int64
		body         string
	}{
		{"HEAD", "/x", 200, 11, ""},
		{"GET", "/204", 204, 0, ""},
		{"GET", "/304", 304, -1, ""},
		{"GET", "/x", 200, 11, "hello world"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || string(b) != tc.body || (tc.length >= 0 && res.ContentLength != tc.length) {
			t.Errorf("%s %s: %d, length %d, body %q", tc.method, tc.path, res.StatusCode, res.ContentLength, b)
		}
	}
}

// TestRetryOnClosedKeepAlive: the upstream closes every connection after
// one response without saying so; reusing such a connection fails, and the
// idempotent request is retried on a new one instead of answering 502.
func TestRetryOnClosedKeepAlive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	_, base := startGateway(t, fmt.Sprintf(`
_format_version: "3.0"
services: [{name: s, url: "http://%s", routes: [{paths: [/]}]}]
`, ln.Addr()), Options{})
	for i := 0; i < 5; i++ {
		if r := do(t, "GET", base+"/", nil); r.status != 200 || r.body != "ok" {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
}

// TestSlowClientCut: a client that never finishes its request headers is
// disconnected after the read timeout instead of holding a connection.
func TestSlowClientCut(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services: [{name: s, url: UPSTREAM, routes: [{paths: [/]}]}]
`, up), Options{ReadTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil { // headers never end
		t.Fatal(err)
	}
	// Bounded wait for the server to act; the test does not time it.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the slow client was not cut off (read %q)", b)
	}
	if len(b) > 0 && !strings.Contains(string(b), " 408 ") {
		t.Errorf("got %q, want the connection closed or a 408", b)
	}
}
