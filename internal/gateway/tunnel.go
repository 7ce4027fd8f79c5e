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

// isUpgrade reports whether a request asks for a protocol upgrade
// (WebSocket and the like), which is tunnelled instead of proxied.
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
