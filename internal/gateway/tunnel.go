package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// isUpgrade reports whether a request asks for a WebSocket upgrade, which
// is tunnelled instead of proxied. Kong tunnels only WebSocket: another
// Upgrade (h2c, for one) is proxied as a plain request, its Upgrade and
// Connection headers removed as hop-by-hop.
func isUpgrade(h *fasthttp.RequestHeader) bool {
	return headerHasToken(h.PeekCanonical(hdrUpgrade), "websocket") && headerHasToken(h.PeekCanonical(hdrConnection), "upgrade")
}

func headerHasToken(v []byte, token string) bool {
	for part := range strings.SplitSeq(string(v), ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// tunnel sends a WebSocket upgrade request to the upstream over a
// connection of its own. An upstream that answers 101 gets the client's
// hijacked connection, bytes copied both ways until one side closes; any
// other answer is relayed as the response to that one request, and
// nothing more of the client's connection reaches the upstream (it is
// closed), so later requests are routed and pass the plugins.
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
		cfg := g.upstreamTLSConfig(svc.Host, svc.TLSVerify, g.trustKey(svc))
		up, err = (&tls.Dialer{NetDialer: d, Config: cfg}).Dial("tcp", g.tunnelAddr(x))
	} else {
		up, err = d.Dial("tcp", g.tunnelAddr(x))
	}
	if err != nil {
		g.metrics.upstreamErrors.WithLabelValues(nameOrID(svc.Name, svc.ID), "connect").Inc()
		x.RespondError(fasthttp.StatusBadGateway, "An invalid response was received from the upstream server")
		return false
	}
	if svc.ReadTimeout > 0 {
		_ = up.SetDeadline(time.Now().Add(svc.ReadTimeout))
	}
	br := bufio.NewReader(up)
	uresp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(uresp)
	uresp.Header.DisableNormalizing()
	uresp.SkipBody = true
	if _, err = up.Write(head.Bytes()); err == nil {
		err = uresp.Header.Read(br)
	}
	if err != nil {
		_ = up.Close()
		kind, status, msg := "connect", fasthttp.StatusBadGateway, "An invalid response was received from the upstream server"
		if isTimeout(err) {
			kind, status, msg = "timeout", fasthttp.StatusGatewayTimeout, "The upstream server is timing out"
		}
		g.metrics.upstreamErrors.WithLabelValues(nameOrID(svc.Name, svc.ID), kind).Inc()
		x.RespondError(status, msg)
		return false
	}
	if uresp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		// Not upgraded: the answer to this request alone.
		defer up.Close()
		uresp.SkipBody = false
		if err := uresp.ReadBody(br, g.server.MaxRequestBodySize); err != nil {
			g.metrics.upstreamErrors.WithLabelValues(nameOrID(svc.Name, svc.ID), "connect").Inc()
			x.RespondError(fasthttp.StatusBadGateway, "An invalid response was received from the upstream server")
			return false
		}
		uresp.Header.CopyTo(&ctx.Response.Header)
		delHopHeaders(&ctx.Response.Header, allHops)
		ctx.Response.SetBody(uresp.Body())
		x.proxied = true
		ctx.SetConnectionClose()
		return false
	}
	_ = up.SetDeadline(time.Time{})
	answer := append([]byte(nil), uresp.Header.Header()...)
	x.proxied = true
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer g.end(x, start)
		defer up.Close()
		x.ctx.Response.SetStatusCode(fasthttp.StatusSwitchingProtocols)
		if _, err := c.Write(answer); err != nil {
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
		_, _ = io.Copy(c, br) // what the upstream sent after its 101, then the rest
		_ = c.Close()
		<-done
	})
	return true
}
