package gateway

import (
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

type upstreamKey struct {
	addr                 string
	tls, verify          bool
	sni                  string
	connect, read, write time.Duration
	retries              int
	// trust names the service's CA certificates and client certificate
	// by content ("" for neither); see upstreamTLS.
	trust string
}

func (g *Gateway) upstream(gen *generation, svc *kongconf.Service) *fasthttp.HostClient {
	if gen != nil {
		if hc, ok := gen.clients.Load(svc); ok {
			return hc.(*fasthttp.HostClient)
		}
		hc := g.upstreamFor(svc)
		gen.clients.Store(svc, hc)
		return hc
	}
	return g.upstreamFor(svc)
}

// upstreamFor returns the pooled client of a service's address and
// timeouts; pools are shared by generations, so reloads keep connections.
func (g *Gateway) upstreamFor(svc *kongconf.Service) *fasthttp.HostClient {
	k := upstreamKey{addr: svc.Addr(), tls: svc.Protocol == "https", verify: svc.TLSVerify, sni: svc.Host,
		connect: svc.ConnectTimeout, read: svc.ReadTimeout, write: svc.WriteTimeout, retries: svc.Retries, trust: g.trustKey(svc)}
	return g.upstreamForKey(k)
}

// upstreamForKey returns the pooled client of k, making it on first use.
func (g *Gateway) upstreamForKey(k upstreamKey) *fasthttp.HostClient {
	if v, ok := g.upstreams.Load(k); ok {
		return v.(*fasthttp.HostClient)
	}
	connect := k.connect
	hc := &fasthttp.HostClient{
		Addr:                      k.addr,
		IsTLS:                     k.tls,
		Name:                      "sluice",
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
		MaxConns:                  1 << 16,
		MaxConnWaitTimeout:        connect,
		MaxIdleConnDuration:       orDur(g.opts.UpstreamIdleTimeout, DefaultUpstreamIdleTimeout),
		ReadTimeout:               k.read,
		WriteTimeout:              k.write,
		StreamResponseBody:        true,
		MaxIdemponentCallAttempts: k.retries + 1,
		RetryIfErr:                retryIf(k.retries),
		Dial: func(addr string) (net.Conn, error) {
			c, err := fasthttp.DialTimeout(addr, connect)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
	}
	if k.tls {
		hc.TLSConfig = g.upstreamTLSConfig(k.sni, k.verify, k.trust)
	}
	v, _ := g.upstreams.LoadOrStore(k, hc)
	return v.(*fasthttp.HostClient)
}

// retryIf retries, up to the service's retries, an idempotent request
// without a streamed body whose connection failed (a keep-alive connection
// the upstream had closed, a refused connection), as nginx's
// proxy_next_upstream error does. Timeouts are not retried.
func retryIf(retries int) fasthttp.RetryIfErrFunc {
	return func(req *fasthttp.Request, attempts int, err error) (bool, bool) {
		if attempts > retries || req.IsBodyStream() || isTimeout(err) || errors.Is(err, fasthttp.ErrTimeout) {
			return false, false
		}
		switch string(req.Header.Method()) {
		case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
			return false, true
		}
		return false, false
	}
}

// dialError marks a failure to connect: the request was not sent, so it
// may go to another target whatever its method.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
