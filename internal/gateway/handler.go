package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

const jsonType = "application/json; charset=utf-8"

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

	if cl := ctx.Request.Header.ContentLength(); cl > g.server.MaxRequestBodySize {
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

	m, ok := gen.router.Match(methodString(ctx.Method()), string(ctx.Host()), x.path, &ctx.Request.Header)
	if !ok {
		x.RespondError(fasthttp.StatusNotFound, "no Route matched with those values")
		return
	}
	x.Match, x.Route, x.Service = m, m.Route, m.Route.Service
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

	x.chain = gen.chains[m.Route]
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
	if !x.responded {
		switch {
		case x.Service == nil:
			x.RespondError(fasthttp.StatusServiceUnavailable, "no Service found with those values")
		case isUpgrade(&ctx.Request.Header):
			ended = g.tunnel(ctx, x, start)
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
}

func (g *Gateway) access(x *Exchange, in *instance) error {
	t0 := time.Since(g.base)
	n := len(x.plugins)
	var span trace.Span
	parent := x.Context
	if tr := g.opts.Tracer; tr != nil {
		var ctx context.Context
		ctx, span = tr.Start(x.Context, "sluice.plugin "+in.entity.Name, trace.WithAttributes(
			attribute.String("sluice.plugin", in.entity.Name),
			attribute.String("sluice.plugin.id", in.entity.ID),
			attribute.String("sluice.route", x.Route.Name),
		))
		x.Context = ctx
	}
	nerr := len(x.storeErrs)
	err := in.plugin.Access(x)
	for _, se := range x.storeErrs[nerr:] {
		g.metrics.storeErrors.WithLabelValues(in.entity.Name).Inc()
		g.log.Warn("counter store failed", "plugin", in.entity.Name, "request_id", x.RequestID(), "error", se.Error())
	}
	in.latency.Observe((time.Since(g.base) - t0).Seconds())
	outcome := "allowed"
	if x.responded {
		outcome = "denied"
	}
	if len(x.plugins) > n {
		outcome = x.plugins[len(x.plugins)-1].outcome
	} else {
		x.plugins = append(x.plugins, pluginOutcome{in.entity.Name, outcome})
	}
	if err != nil {
		outcome = "error"
	}
	in.decision(g.metrics, outcome).Inc()
	if span != nil {
		span.SetAttributes(attribute.String("sluice.outcome", outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		x.Context = parent // the next plugin's span is a sibling, not a child
	}
	return err
}

func (g *Gateway) requestCounter(gen *generation, ch *chain, r *kongconf.Route, route, service string, status int) prometheus.Counter {
	if ch != nil {
		for i := range ch.codes {
			cc := ch.codes[i].Load()
			if cc == nil {
				break
			}
			if cc.code == status {
				return cc.c
			}
		}
	}
	if gen == nil {
		return g.metrics.requests.WithLabelValues(route, service, strconv.Itoa(status))
	}
	k := counterKey{r, status}
	if c, ok := gen.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := g.metrics.requests.WithLabelValues(route, service, strconv.Itoa(status))
	gen.counters.Store(k, c)
	if ch != nil {
		for i := range ch.codes {
			if ch.codes[i].CompareAndSwap(nil, &codeCounter{status, c}) || ch.codes[i].Load().code == status {
				break
			}
		}
	}
	return c
}

// end is the log phase: metrics, access log and the plugins' OnEnd
// functions. It runs once per request.
func (g *Gateway) end(x *Exchange, start time.Time) {
	for _, f := range x.onEnd {
		f()
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
			slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if x.Consumer != nil {
			attrs = append(attrs, slog.String("consumer", nameOrID(x.Consumer.Username, x.Consumer.ID)))
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

func routeAllowsScheme(r *kongconf.Route, scheme string) bool {
	for _, p := range r.Protocols {
		if p == scheme {
			return true
		}
	}
	return false
}

func isUpgrade(h *fasthttp.RequestHeader) bool {
	return len(h.PeekCanonical(hdrUpgrade)) > 0 && headerHasToken(h.PeekCanonical(hdrConnection), "upgrade")
}

func headerHasToken(v []byte, token string) bool {
	for part := range strings.SplitSeq(string(v), ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// connectionTokens returns the header names listed in Connection.
func connectionTokens(v []byte) []string {
	var out []string
	for part := range strings.SplitSeq(string(v), ",") {
		if p := strings.TrimSpace(part); p != "" && !strings.EqualFold(p, "close") && !strings.EqualFold(p, "keep-alive") {
			out = append(out, p)
		}
	}
	return out
}

// prepareUpstream rewrites ctx.Request in place into the upstream request:
// path and host, hop-by-hop headers, X-Forwarded-* and X-Real-IP as Kong
// sets them. keepUpgrade keeps Connection/Upgrade for a tunnel.
func (g *Gateway) prepareUpstream(ctx *fasthttp.RequestCtx, x *Exchange, keepUpgrade bool) {
	req := &ctx.Request
	svc := x.Service
	h := &req.Header
	var upgrade []byte
	if keepUpgrade {
		upgrade = append(upgrade, h.PeekCanonical(hdrUpgrade)...)
	}
	delHopHeaders(h, requestHops(h))
	if keepUpgrade {
		h.Set("Connection", "Upgrade")
		h.SetBytesV("Upgrade", upgrade)
	}
	h.ResetConnectionClose()

	peer, trusted := x.peer, x.peerTrusted
	proto := protoHTTP
	if ctx.IsTLS() {
		proto = protoHTTPS
	}
	// Header values are built in one scratch buffer: SetCanonical copies
	// the value, so the buffer is free again after each call.
	var scratch [64]byte
	buf := scratch[:0]
	buf = append(buf, h.PeekCanonical(hdrXForwardedFor)...)
	if len(buf) > 0 {
		buf = append(buf, ", "...)
	}
	h.SetCanonical(hdrXForwardedFor, appendAddr(buf, peer))
	h.SetCanonical(hdrXRealIP, appendAddr(buf[:0], x.ClientIP))
	setIfUntrusted := func(name, own []byte) {
		if !trusted || len(h.PeekCanonical(name)) == 0 {
			h.SetCanonical(name, own)
		}
	}
	setIfUntrusted(hdrXForwardedProto, proto)
	// The Host header is read once for X-Forwarded-Host and, with
	// preserve_host, for the upstream; h.SetHost below may reuse its bytes.
	origHost := append(buf[:0], ctx.Host()...)
	setIfUntrusted(hdrXForwardedHost, hostOnly(origHost))
	if la, ok := ctx.LocalAddr().(*net.TCPAddr); ok {
		var port [8]byte
		setIfUntrusted(hdrXForwardedPort, strconv.AppendInt(port[:0], int64(la.Port), 10))
	} else {
		setIfUntrusted(hdrXForwardedPort, nil)
	}
	setIfUntrusted(hdrXForwardedPath, ctx.Path())
	if x.Route.StripPath && x.Match.Prefix != "/" && x.Match.Prefix != "" {
		var prefix [64]byte
		setIfUntrusted(hdrXForwardedPrefix, append(prefix[:0], x.Match.Prefix...))
	} else if !trusted && hasRequestHeader(h, hdrXForwardedPrefix) {
		h.Del("X-Forwarded-Prefix")
	}

	uri := req.URI()
	uri.SetPath(x.Match.UpstreamPath(svc.Path))
	uri.SetScheme(svc.Protocol)
	if x.Route.PreserveHost {
		uri.SetHostBytes(origHost)
		h.SetHostBytes(origHost)
	} else {
		host := svc.Host
		if (svc.Protocol == "http" && svc.Port != 80) || (svc.Protocol == "https" && svc.Port != 443) {
			host = svc.Addr()
		}
		uri.SetHost(host)
		h.SetHost(host)
	}
	req.UseHostHeader = true
}

// hostOnly returns a Host header without its port.
func hostOnly(h []byte) []byte {
	if i := bytes.LastIndexByte(h, ':'); i >= 0 && !bytes.HasSuffix(h, []byte("]")) {
		return h[:i]
	}
	return h
}

type upstreamKey struct {
	addr                 string
	tls, verify          bool
	sni                  string
	connect, read, write time.Duration
	retries              int
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
		connect: svc.ConnectTimeout, read: svc.ReadTimeout, write: svc.WriteTimeout, retries: svc.Retries}
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
			return fasthttp.DialTimeout(addr, connect)
		},
	}
	if k.tls {
		hc.TLSConfig = &tls.Config{ServerName: k.sni, MinVersion: tls.VersionTLS12, InsecureSkipVerify: !k.verify} //nolint:gosec // the operator's choice (tls_verify: false)
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

// proxy sends the request upstream and sets the response. It reports
// whether the log phase was handed to the streamed response body (true) or
// is left to the handler.
func (g *Gateway) proxy(ctx *fasthttp.RequestCtx, x *Exchange, start time.Time) bool {
	clientClose := ctx.Request.Header.ConnectionClose()
	var limited *limitedBody
	if cl := ctx.Request.Header.ContentLength(); ctx.Request.IsBodyStream() && (cl == 0 || cl == -2) {
		// No body (-2 is a request without Content-Length or chunked
		// encoding, which has none in HTTP/1.1): drop the empty stream so that the request can be
		// retried (fasthttp never retries a request with a body stream).
		// The server keeps its own reference to the stream.
		ctx.Request.ResetBody()
	}
	if ctx.Request.IsBodyStream() && ctx.Request.Header.ContentLength() == -1 {
		// fasthttp bounds only bodies with a Content-Length when streaming;
		// a chunked body is cut here. The server loop keeps its own
		// reference to the original stream and drains it.
		limited = &limitedBody{r: ctx.Request.BodyStream(), left: int64(g.server.MaxRequestBodySize)}
		ctx.Request.SetBodyStream(limited, -1)
	}
	g.prepareUpstream(ctx, x, false)
	hc := g.upstream(x.gen, x.Service)
	uresp := fasthttp.AcquireResponse()
	sent := time.Now()
	err := hc.Do(&ctx.Request, uresp)
	x.upstreamLatency = time.Since(sent)
	x.proxyLatency = sent.Sub(start)
	x.proxied = err == nil
	if clientClose {
		defer ctx.SetConnectionClose()
	}
	if err != nil {
		fasthttp.ReleaseResponse(uresp)
		if limited != nil && limited.exceeded {
			ctx.SetConnectionClose()
			x.RespondError(fasthttp.StatusRequestEntityTooLarge, "Request size limit exceeded")
			return false
		}
		kind, status, msg := "connect", fasthttp.StatusBadGateway, "An invalid response was received from the upstream server"
		if isTimeout(err) || errors.Is(err, fasthttp.ErrTimeout) {
			kind, status, msg = "timeout", fasthttp.StatusGatewayTimeout, "The upstream server is timing out"
		}
		g.metrics.upstreamErrors.WithLabelValues(nameOrID(x.Service.Name, x.Service.ID), kind).Inc()
		g.log.Warn("upstream failed", "request_id", x.RequestID(), "service", x.Service.Name, "error", err.Error())
		x.RespondError(status, msg)
		return false
	}
	uresp.Header.CopyTo(&ctx.Response.Header)
	rh := &ctx.Response.Header
	hops, replaces := responseHops(rh, x.respHeaders)
	delHopHeaders(rh, hops)
	if replaces {
		delReplaced(rh, x.respHeaders)
	}
	rh.ResetConnectionClose()
	if !uresp.IsBodyStream() {
		ctx.Response.SetBodyRaw(append([]byte(nil), uresp.Body()...))
		fasthttp.ReleaseResponse(uresp)
		return false
	}
	n := uresp.Header.ContentLength()
	if n >= 0 && n <= maxBufferedBody {
		bufferBody(ctx, x, uresp, n)
		return false
	}
	if n < 0 {
		n = -1 // chunked to the client, whatever framing upstream used
	}
	body := &upstreamBody{r: uresp.BodyStream(), resp: uresp, g: g, x: x, start: start}
	ctx.Response.SetBodyStream(body, n)
	ctx.Response.ImmediateHeaderFlush = true
	return true
}

// maxBufferedBody is the largest upstream body, by its Content-Length,
// that is read whole before the response is sent; larger ones and those
// without a length (chunked: event streams, long polls) are streamed.
const maxBufferedBody = 32 << 10

// bufferBody reads an upstream body of n bytes into the response, so that
// headers and body leave in one write (as nginx's proxy_buffering does);
// streaming costs a flush of the headers, another write for the body and
// the stream's bookkeeping. An upstream that fails mid-body gets what
// streaming gave: the client receives what arrived, then the connection
// breaks.
func bufferBody(ctx *fasthttp.RequestCtx, x *Exchange, uresp *fasthttp.Response, n int) {
	if cap(x.body) < n {
		x.body = make([]byte, n, max(n, 4<<10))
	}
	b := x.body[:n]
	// The stream reports io.EOF with its last bytes, which lets fasthttp
	// pool the upstream connection when the stream is closed.
	k, err := io.ReadFull(uresp.BodyStream(), b)
	_ = uresp.CloseBodyStream() // an error here is upstream's going away, seen by ReadFull
	fasthttp.ReleaseResponse(uresp)
	if err != nil {
		ctx.Response.SetBodyStream(&brokenBody{b: append([]byte(nil), b[:k]...), err: err}, n)
		ctx.Response.ImmediateHeaderFlush = true // as streaming would have, before the error
		return
	}
	ctx.Response.SetBody(b) // a copy: x.body is reused once the request ends
}

// brokenBody returns b, then err.
type brokenBody struct {
	b   []byte
	err error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		return 0, b.err
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

// errBodyTooLarge ends a chunked request body over the size limit.
var errBodyTooLarge = errors.New("gateway: request body too large")

// limitedBody passes at most left bytes of a request body.
type limitedBody struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells an exact fit from an overflow.
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			b.exceeded = true
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// upstreamBody streams an upstream response body to the client and, once
// it is done (fully sent, or the client went away), releases the upstream
// response and runs the log phase.
type upstreamBody struct {
	r     io.Reader
	resp  *fasthttp.Response
	g     *Gateway
	x     *Exchange
	start time.Time
	once  sync.Once
}

func (b *upstreamBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *upstreamBody) Close() error {
	b.once.Do(func() {
		_ = b.resp.CloseBodyStream() // an error here is the client's or upstream's going away
		fasthttp.ReleaseResponse(b.resp)
		b.g.end(b.x, b.start)
	})
	return nil
}

// tunnel hands a WebSocket (or other Upgrade) request to the upstream over
// a hijacked connection and copies bytes both ways until one side closes.
func (g *Gateway) tunnel(ctx *fasthttp.RequestCtx, x *Exchange, start time.Time) bool {
	g.prepareUpstream(ctx, x, true)
	svc := x.Service
	var head bytes.Buffer
	bw := bufio.NewWriter(&head)
	if err := ctx.Request.Header.Write(bw); err != nil {
		x.RespondError(fasthttp.StatusBadRequest, "Bad request")
		return false
	}
	_ = bw.Flush()
	var up net.Conn
	var err error
	d := &net.Dialer{Timeout: svc.ConnectTimeout}
	if svc.Protocol == "https" {
		cfg := &tls.Config{ServerName: svc.Host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: !svc.TLSVerify} //nolint:gosec // tls_verify: false
		up, err = (&tls.Dialer{NetDialer: d, Config: cfg}).Dial("tcp", svc.Addr())
	} else {
		up, err = d.Dial("tcp", svc.Addr())
	}
	if err != nil {
		g.metrics.upstreamErrors.WithLabelValues(nameOrID(svc.Name, svc.ID), "connect").Inc()
		x.RespondError(fasthttp.StatusBadGateway, "An invalid response was received from the upstream server")
		return false
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer g.end(x, start)
		defer up.Close()
		x.ctx.Response.SetStatusCode(fasthttp.StatusSwitchingProtocols)
		if _, err := up.Write(head.Bytes()); err != nil {
			return
		}
		done := make(chan struct{}, 2)
		go func() {
			_, _ = io.Copy(up, c)
			if cw, ok := up.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			done <- struct{}{}
		}()
		_, _ = io.Copy(c, up)
		_ = c.Close()
		<-done
	})
	return true
}
