package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
)

// HTTP/2 is served by net/http (fasthttp has no HTTP/2); each request is
// copied into a fasthttp.RequestCtx and runs through the same handle as
// HTTP/1.1, and the response is copied back. docs/benchmarks.md has the
// measurements behind this choice.

type connKey struct{}

// newH2Server returns the server of one TLS listener's HTTP/2
// connections.
func (g *Gateway) newH2Server() *http.Server {
	return &http.Server{
		Handler:           http.HandlerFunc(g.serveH2),
		ReadHeaderTimeout: orDur(g.opts.ReadTimeout, DefaultReadTimeout),
		IdleTimeout:       orDur(g.opts.IdleTimeout, DefaultIdleTimeout),
		WriteTimeout:      g.opts.WriteTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		// net/http's own complaints (a client's protocol error) at debug.
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// h2Conn is the connection a bridged RequestCtx sees: the TLS state and
// addresses of the HTTP/2 connection, and no bytes (the stream is
// net/http's).
type h2Conn struct{ *tls.Conn }

var errH2Conn = errors.New("gateway: an HTTP/2 stream has no connection of its own")

func (c h2Conn) Read([]byte) (int, error)  { return 0, errH2Conn }
func (c h2Conn) Write([]byte) (int, error) { return 0, errH2Conn }
func (c h2Conn) Close() error              { return nil }

// h2Body is a request body of an HTTP/2 stream, which net/http closes.
type h2Body struct{ io.Reader }

var h2Ctxs sync.Pool

func (g *Gateway) serveH2(w http.ResponseWriter, r *http.Request) {
	tc, _ := r.Context().Value(connKey{}).(*tls.Conn)
	if tc == nil {
		http.Error(w, "no connection", http.StatusInternalServerError)
		return
	}
	ctx, _ := h2Ctxs.Get().(*fasthttp.RequestCtx)
	if ctx == nil {
		ctx = new(fasthttp.RequestCtx)
	}
	ctx.Init2(h2Conn{tc}, nil, false)
	req := &ctx.Request
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.RequestURI)
	req.Header.SetHost(r.Host)
	for k, vs := range r.Header {
		switch strings.ToLower(k) {
		case "cookie":
			// HTTP/2 may split cookies over several fields; HTTP/1.1 has one.
			req.Header.Set(k, strings.Join(vs, "; "))
			continue
		case "content-length", "connection", "upgrade", "keep-alive", "proxy-connection", "transfer-encoding", "te", "host":
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// Without Close: net/http closes the body when the handler
		// returns, and replacing a stream (proxy's body limit) closes
		// the old one, which would cut a body without Content-Length.
		req.SetBodyStream(h2Body{r.Body}, int(r.ContentLength))
	} else {
		req.Header.SetContentLength(0)
	}
	g.handle(ctx)
	g.writeH2(w, r, &ctx.Response)
	ctx.Request.Reset()
	ctx.Response.Reset()
	h2Ctxs.Put(ctx)
}

// writeH2 copies a handled response to the HTTP/2 stream and closes its
// body stream (which runs the log phase of a streamed response).
func (g *Gateway) writeH2(w http.ResponseWriter, r *http.Request, resp *fasthttp.Response) {
	hdr := w.Header()
	for k, v := range resp.Header.All() {
		switch strings.ToLower(string(k)) {
		case "connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "content-length":
			continue
		}
		hdr.Add(string(k), string(v))
	}
	stream := resp.IsBodyStream()
	if !stream {
		n := len(resp.Body())
		if r.Method == http.MethodHead && resp.Header.ContentLength() >= 0 {
			n = resp.Header.ContentLength()
		}
		hdr.Set("Content-Length", strconv.Itoa(n))
	} else if n := resp.Header.ContentLength(); n >= 0 {
		hdr.Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(resp.StatusCode())
	if !stream {
		_, _ = w.Write(resp.Body())
		return
	}
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	src := resp.BodyStream()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			_ = resp.CloseBodyStream()
			if !errors.Is(err, io.EOF) {
				// The upstream broke off: reset the stream, as a broken
				// HTTP/1.1 connection tells the client.
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
	_ = resp.CloseBodyStream()
}
