package gateway

import (
	"fmt"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/testservers"
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
