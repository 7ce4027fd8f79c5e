package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/gateway/router"
)

// handle runs one request: match a route, run its plugins' access phase,
// then answer, proxy or tunnel; the log phase (end) runs when the response
// is done, which for a streamed body or a tunnel is after handle returns.
func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	g.inflight.Add(1)
	g.active.Add(1)
	g.metrics.inflight.Inc()
	// The request context ends when the server shuts down (fasthttp has
	// no per-request cancellation when a client goes away).
	now := start // the decision time, read once with start unless a clock is set
	if g.opts.Now != nil {
		now = g.opts.Now()
	}
	x := acquireExchange(&g.exchanges, ctx, now, g.reqSeq.Add(1), start)
	if g.opts.AccessLog {
		// Kept before the request is rewritten for the upstream.
		x.logMethod, x.logHost, x.logPath = methodString(ctx.Method()), string(ctx.Host()), x.path
	}
	ended := false
	defer func() {
		if !ended {
			g.end(x, start)
		}
	}()

	if status, msg, reason := g.checkRequest(ctx); status != 0 {
		x.RespondError(status, msg)
		ctx.SetConnectionClose()
		g.clientError(reason)
		return
	}
	if cl := ctx.Request.Header.ContentLength(); cl > g.server.MaxRequestBodySize {
		g.clientError(clientBodyTooLarge)
		x.RespondError(fasthttp.StatusRequestEntityTooLarge, "Request size limit exceeded")
		ctx.SetConnectionClose() // the unread body makes the connection unusable
		return
	}
	gen := g.gen.Load()
	if gen == nil {
		x.RespondError(fasthttp.StatusServiceUnavailable, "no configuration loaded")
		return
	}
	x.gen = gen
	peer, proxied := peerAddr(ctx)
	trusted := g.opts.ClientIP.Trusted(peer)
	x.peer, x.peerTrusted = peer, trusted
	var values []string
	// Resolve reads the header only from a trusted peer.
	if h := g.opts.ClientIP.Header(); trusted && h != "" && h != clientip.ProxyProtocol {
		for _, v := range ctx.Request.Header.PeekAll(h) {
			values = append(values, string(v))
		}
	}
	x.ClientIP = g.opts.ClientIP.Resolve(peer, values, proxied)
	// As Kong: the Host header (not an absolute-form URI's host) and the
	// port the request arrived on.
	rq := router.Request{Method: methodString(ctx.Method()), Host: string(ctx.Request.Header.Host()), Path: x.path,
		Port: localPort(ctx), TLS: ctx.IsTLS(), Headers: &ctx.Request.Header}
	if rq.TLS {
		if cs := ctx.TLSConnectionState(); cs != nil {
			rq.SNI = cs.ServerName
		}
	}
	m, ok := gen.router.Match(rq)
	if !ok {
		x.RespondError(fasthttp.StatusNotFound, "no Route matched with those values")
		return
	}
	x.Match, x.Route, x.Service = m, m.Route, m.Route.Service
	x.chain = gen.chains[m.Route]
	if !routeAllowsScheme(m.Route, requestScheme(ctx, trusted)) {
		if code := m.Route.HTTPSRedirectStatusCode; code != fasthttp.StatusUpgradeRequired {
			x.Respond(code, "", nil)
			loc := append(append([]byte("https://"), hostOnly(ctx.Host())...), ctx.RequestURI()...)
			ctx.Response.Header.SetCanonical(hdrLocation, loc)
			return
		}
		x.RespondError(fasthttp.StatusUpgradeRequired, "Please use HTTPS protocol")
		return
	}

	for _, list := range x.chain.names {
		in := pick(list, x.Consumer)
		if in == nil {
			continue
		}
		if err := g.access(x, in); err != nil {
			g.log.Error("plugin failed", "plugin", in.entity.Name, "request_id", x.RequestID(), "error", err.Error())
			x.RespondError(fasthttp.StatusInternalServerError, "An unexpected error occurred")
		}
		if x.responded {
			break
		}
	}
	if !x.responded && x.chain.bodies {
		x.wantBody = bodyWanted(x)
	}
	if !x.responded {
		switch {
		case x.Service == nil:
			x.RespondError(fasthttp.StatusServiceUnavailable, "no Service found with those values")
		case isUpgrade(&ctx.Request.Header):
			ended = g.tunnel(ctx, x, start)
			x.tunnelled = ended
		default:
			ended = g.proxy(ctx, x, start)
		}
	}
	// The plugins' headers, as set: SetCanonical keeps the name's case and
	// skips fasthttp's normalization (a copy and a case fold per name);
	// proxy has removed the upstream headers they replace.
	h := &ctx.Response.Header
	for _, kv := range x.respHeaders {
		h.SetCanonical(bytesOf(kv[0]), bytesOf(kv[1]))
	}
	// Kong's latency_tokens: time spent in sluice before proxying and
	// waiting for the upstream's headers, or answering itself.
	var num [20]byte
	if x.proxied {
		h.SetCanonical(hdrKongUpstreamLat, strconv.AppendInt(num[:0], x.upstreamLatency.Milliseconds(), 10))
		h.SetCanonical(hdrKongProxyLat, strconv.AppendInt(num[:0], x.proxyLatency.Milliseconds(), 10))
	} else if !ended {
		h.SetCanonical(hdrKongResponseLat, strconv.AppendInt(num[:0], time.Since(start).Milliseconds(), 10))
	}
	h.SetCanonical(hdrKongRequestID, x.requestID[:x.requestIDLen])
	if x.chain.filters && !x.tunnelled {
		filterResponse(x)
	}
}

// end is the log phase: metrics, access log and the plugins' OnEnd
// functions. It runs once per request.
func (g *Gateway) end(x *Exchange, start time.Time) {
	for _, f := range x.onEnd {
		f()
	}
	if x.chain != nil && x.chain.logs {
		logPhase(x)
	}
	status := x.ctx.Response.StatusCode()
	route, service := "", ""
	if x.Route != nil {
		route = nameOrID(x.Route.Name, x.Route.ID)
	}
	if x.Service != nil {
		service = nameOrID(x.Service.Name, x.Service.ID)
	}
	g.requestCounter(x.gen, x.chain, x.Route, route, service, status).Inc()
	elapsed := time.Since(start)
	rm := g.metrics.noRoute
	if x.chain != nil {
		rm = x.chain.metrics
	}
	rm.requestTime.Observe(elapsed.Seconds())
	if x.proxied {
		rm.upstreamTime.Observe(x.upstreamLatency.Seconds())
	}
	bytesIn := x.ctx.Request.Header.ContentLength()
	if bytesIn < 0 {
		bytesIn = int(x.chunkedIn) // a chunked body, as far as it was read
	}
	bytesOut := responseBytes(&x.ctx.Response)
	if x.streamedOut >= 0 { // a streamed body: what was sent
		bytesOut = int(x.streamedOut)
	}
	if bytesIn > 0 {
		rm.bytesIn.Add(float64(bytesIn))
	}
	if bytesOut > 0 {
		rm.bytesOut.Add(float64(bytesOut))
	}
	g.metrics.inflight.Dec()
	if g.opts.AccessLog {
		attrs := []slog.Attr{
			slog.String("request_id", x.RequestID()),
			slog.String("client_ip", x.clientIP()),
			slog.String("method", x.logMethod),
			slog.String("host", x.logHost),
			slog.String("path", x.logPath),
			slog.Int("status", status),
			slog.String("route", route),
			slog.String("service", service),
			slog.Float64("latency_ms", float64(elapsed.Microseconds())/1000),
		}
		if ua := x.ctx.Request.Header.UserAgent(); len(ua) > 0 {
			attrs = append(attrs, slog.String("user_agent", string(ua)))
		}
		if x.correlationID != "" {
			attrs = append(attrs, slog.String("correlation_id", x.correlationID)) // Kong's serialized correlation_id
		}
		attrs = append(attrs, slog.Int("bytes_in", max(bytesIn, 0)))
		if bytesOut >= 0 {
			attrs = append(attrs, slog.Int("bytes_out", bytesOut))
		}
		if x.proxied {
			attrs = append(attrs, slog.Float64("upstream_latency_ms", float64(x.upstreamLatency.Microseconds())/1000))
		}
		if x.Consumer != nil {
			attrs = append(attrs, slog.String("consumer", nameOrID(x.Consumer.Username, x.Consumer.ID)))
		}
		if d := x.denial; d.plugin != "" {
			attrs = append(attrs, slog.String("denied_by", d.plugin), slog.Int64("denied_limit", d.limit),
				slog.Int64("denied_window_s", int64(d.window/time.Second)))
		}
		for _, p := range x.plugins {
			attrs = append(attrs, slog.String("plugin."+p.name, p.outcome))
		}
		g.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
	}
	x.release(&g.exchanges)
	g.active.Add(-1)
	g.inflight.Done()
}

// responseBytes is the size of the response body: its Content-Length, the
// buffered body's length, or -1 for a body streamed without a length.
func responseBytes(r *fasthttp.Response) int {
	if n := r.Header.ContentLength(); n >= 0 {
		return n
	}
	if r.IsBodyStream() {
		return -1
	}
	return len(r.Body())
}

func nameOrID(name, id string) string {
	if name != "" {
		return name
	}
	return id
}

// requestScheme is https for a TLS connection, or when a trusted proxy
// says so in X-Forwarded-Proto.
func requestScheme(ctx *fasthttp.RequestCtx, trusted bool) string {
	if ctx.IsTLS() || (trusted && bytes.EqualFold(ctx.Request.Header.PeekCanonical(hdrXForwardedProto), protoHTTPS)) {
		return "https"
	}
	return "http"
}

// routeAllowsScheme reports whether r serves a request of scheme. As in
// Kong, only a route for https alone refuses one: over http it answers
// 426 or redirects; a route for http alone serves https too.
func routeAllowsScheme(r *kongconf.Route, scheme string) bool {
	https, http := false, false
	for _, p := range r.Protocols {
		https = https || p == "https"
		http = http || p == "http"
	}
	return !https || http || scheme == "https"
}

// localPort returns the port ctx's request arrived on, or 0.
func localPort(ctx *fasthttp.RequestCtx) int {
	if la, ok := ctx.LocalAddr().(*net.TCPAddr); ok {
		return la.Port
	}
	return 0
}
