package gateway

import (
	"fmt"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/policy"
)

// BenchmarkProxy measures one proxied request over loopback (client,
// gateway and a fasthttp upstream in this process), without plugins and
// with rate-limiting-advanced in memory and on Redis with sync_rate 0.1.
func BenchmarkProxy(b *testing.B) {
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	upstream := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go func() { _ = upstream.Serve(uln) }()
	defer upstream.Shutdown()

	cfg := `
_format_version: "3.0"
services:
  - name: s
    url: http://` + uln.Addr().String() + `
    routes:
      - {name: plain, paths: [/plain]}
      - name: rla
        paths: [/rla]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench}
`
	// The Redis route is added (with its redis-server) only when the redis
	// case runs, so that the others run without a child process (whose exit
	// signal callgrind does not survive).
	redisRoute := func(port int) string {
		return `      - name: redis
        paths: [/redis]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench-redis,
                     strategy: redis, sync_rate: 0.1, redis: {host: 127.0.0.1, port: ` + fmt.Sprint(port) + `}}
`
	}
	g, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Load([]byte(cfg), "bench"); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer func() { _ = g.server.Shutdown() }()
	client := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 256}

	for _, path := range []string{"/plain", "/rla", "/redis"} {
		b.Run(path[1:], func(b *testing.B) {
			if path == "/redis" {
				rs := testservers.Redis(b, testservers.RedisOptions{})
				if err := g.Load([]byte(cfg+redisRoute(rs.Port())), "bench"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(res)
				req.SetRequestURI("http://" + ln.Addr().String() + path)
				for pb.Next() {
					if err := client.Do(req, res); err != nil || res.StatusCode() != 200 || string(res.Body()) != "ok" {
						b.Errorf("%v %d %q", err, res.StatusCode(), res.Body())
						return
					}
				}
			})
		})
	}
}

// handleBench serves one request per iteration through the gateway's
// handler, called in the benchmark's goroutine (no client, no server
// loop), so that bench/instructions.sh counts the gateway's own work: the
// route, the plugins, the proxying to a loopback upstream and the log
// phase with its metrics.
func handleBench(b *testing.B, path string, want int) { handleBenchWith(b, path, want, Options{}) }

func handleBenchWith(b *testing.B, path string, want int, opts Options) {
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	upstream := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go func() { _ = upstream.Serve(uln) }()
	defer upstream.Shutdown()
	g, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Load([]byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://`+uln.Addr().String()+`
    routes:
      - {name: plain, paths: [/plain]}
      - name: rla
        paths: [/rla]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench}
      - name: answered
        paths: [/answered]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench-answered}
          - name: request-termination
            config: {status_code: 200, message: ok}
      - name: denied
        paths: [/denied]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1], window_size: [3600], identifier: ip, namespace: bench-denied}
`), "bench"); err != nil {
		b.Fatal(err)
	}
	var req fasthttp.Request
	req.SetRequestURI("http://gw" + path)
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	serve := func() int {
		req.CopyTo(&ctx.Request) // the handler rewrites the request for the upstream
		ctx.Response.Reset()
		g.handle(ctx)
		return ctx.Response.StatusCode()
	}
	if path == "/denied" {
		serve() // the one request the limit allows
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if s := serve(); s != want {
			b.Fatalf("status %d, want %d", s, want)
		}
	}
}

// BenchmarkHandlePlain: a proxied request without plugins.
func BenchmarkHandlePlain(b *testing.B) { handleBench(b, "/plain", 200) }

// BenchmarkHandleRLA: a proxied request allowed by rate-limiting-advanced
// in memory.
func BenchmarkHandleRLA(b *testing.B) { handleBench(b, "/rla", 200) }

// BenchmarkHandleAnswered: a request rate-limiting-advanced allows and
// request-termination answers: the whole path but the upstream, which
// blocks on the network and so cannot be counted by bench/instructions.sh
// (callgrind loses a goroutine's stack when it parks).
func BenchmarkHandleAnswered(b *testing.B) { handleBench(b, "/answered", 200) }

// BenchmarkHandleDenied: a request rate-limiting-advanced denies (429).
func BenchmarkHandleDenied(b *testing.B) { handleBench(b, "/denied", 429) }

// BenchmarkHandleRLANoTop and BenchmarkHandleDeniedNoTop are the two
// before without the top-list sketch: the difference is its cost.
func BenchmarkHandleRLANoTop(b *testing.B) {
	sh := NewShared(policy.RegistryOptions{TopKeys: -1})
	defer sh.Close()
	handleBenchWith(b, "/rla", 200, Options{Shared: sh})
}

func BenchmarkHandleDeniedNoTop(b *testing.B) {
	sh := NewShared(policy.RegistryOptions{TopKeys: -1})
	defer sh.Close()
	handleBenchWith(b, "/denied", 429, Options{Shared: sh})
}
