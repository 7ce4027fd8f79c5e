package gateway

import (
	"bytes"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/kongpath"
)

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
	// As Kong: the path as the client sent it.
	setIfUntrusted(hdrXForwardedPath, req.URI().PathOriginal())
	if x.Route.StripPath && x.Match.Prefix != "/" && x.Match.Prefix != "" {
		var prefix [64]byte
		setIfUntrusted(hdrXForwardedPrefix, append(prefix[:0], x.Match.Prefix...))
	} else if !trusted && hasRequestHeader(h, hdrXForwardedPrefix) {
		h.Del("X-Forwarded-Prefix")
	}

	// The upstream path is escaped as Kong escapes it: the percent-encoded
	// reserved characters the router kept stay encoded, and no byte that
	// would change the request line's meaning is sent raw.
	uri := req.URI()
	if x.upstreamPath != nil {
		uri.SetPath(kongpath.Escape(*x.upstreamPath))
	} else {
		uri.SetPath(kongpath.Escape(x.Match.UpstreamPath(svc.Path)))
	}
	uri.SetScheme(svc.Protocol)
	if x.upstreamHost != nil {
		uri.SetHost(*x.upstreamHost)
		h.SetHost(*x.upstreamHost)
	} else if x.Route.PreserveHost {
		// As Kong: the Host header as the client wrote it (origHost,
		// from the URI, is lower-cased).
		raw := append(buf[len(origHost):len(origHost)], h.Host()...)
		h.SetHostBytes(raw)
		uri.SetHostBytes(raw)
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
