package gateway

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"
)

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
	if cl := ctx.Request.Header.ContentLength(); ctx.Request.IsBodyStream() && (cl < 0 || !bridged(ctx)) {
		// Read through limitedBody, which tells the client's failures
		// (a malformed chunk, a body cut short) from the upstream's.
		// (An HTTP/2 body with a length, which net/http checks, is left
		// as it is.) fasthttp
		// bounds only bodies with a Content-Length when streaming; a
		// chunked body is cut here. The server loop keeps its own reference
		// to the original stream and drains it.
		limit := int64(g.server.MaxRequestBodySize)
		if cl >= 0 {
			limit = int64(cl)
		} else if x.bodyLimited && x.bodyLimit < limit {
			limit = x.bodyLimit
		}
		limited = &x.inBody
		*limited = limitedBody{r: ctx.Request.BodyStream(), left: limit}
		ctx.Request.SetBodyStream(limited, cl)
	}
	g.prepareUpstream(ctx, x, false)
	uresp := fasthttp.AcquireResponse()
	sent := time.Now()
	err := g.doUpstream(ctx, x, uresp)
	x.upstreamLatency = time.Since(sent)
	x.proxyLatency = sent.Sub(start)
	x.proxied = err == nil
	if limited != nil && ctx.Request.Header.ContentLength() == -1 {
		x.chunkedIn = limited.read
	}
	if clientClose {
		defer ctx.SetConnectionClose()
	}
	if err != nil {
		fasthttp.ReleaseResponse(uresp)
		if limited != nil && limited.exceeded {
			ctx.SetConnectionClose()
			g.clientError(clientBodyTooLarge)
			x.RespondError(fasthttp.StatusRequestEntityTooLarge, "Request size limit exceeded")
			return false
		}
		if limited != nil && limited.failed != nil {
			// The client's body was malformed or cut short: nginx's 400.
			ctx.SetConnectionClose()
			g.clientError(clientBadBody)
			g.log.Info("request body unreadable", "request_id", x.RequestID(), "error", limited.failed.Error())
			x.RespondError(fasthttp.StatusBadRequest, "Bad request")
			return false
		}
		if errors.Is(err, errNoPeer) {
			g.metrics.upstreamErrors.WithLabelValues(nameOrID(x.Service.Name, x.Service.ID), "no_healthy_target").Inc()
			x.RespondError(fasthttp.StatusServiceUnavailable, errNoPeer.Error())
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
	if x.wantBody != nil && wantsBody(x.wantBody, uresp.Header.ContentType()) {
		b, complete, err := readWholeBody(uresp)
		switch {
		case complete:
			_ = uresp.CloseBodyStream()
			fasthttp.ReleaseResponse(uresp)
			ctx.Response.SetBody(b)
			return false
		case err != nil:
			_ = uresp.CloseBodyStream()
			fasthttp.ReleaseResponse(uresp)
			ctx.Response.SetBodyStream(&brokenBody{b: b, err: err}, -1)
			ctx.Response.ImmediateHeaderFlush = true
			return false
		}
		// Too large to filter: sent as it came, the bytes read first.
		g.log.Warn("response body too large for the response filters: sent unchanged", "request_id", x.RequestID(), "limit_bytes", maxFilteredBody)
		body := &upstreamBody{r: io.MultiReader(bytes.NewReader(b), uresp.BodyStream()), resp: uresp, g: g, x: x, start: start}
		ctx.Response.SetBodyStream(body, n)
		ctx.Response.ImmediateHeaderFlush = true
		x.bodyUnfiltered = true
		return true
	}
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
