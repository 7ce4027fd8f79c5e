package gateway

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

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

// limitedBody passes at most left bytes of a request body, counting them
// in read; failed keeps the client's read error (a malformed chunk, a body
// cut short).
type limitedBody struct {
	r        io.Reader
	left     int64
	read     int64
	exceeded bool
	failed   error
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
		if err != nil && err != io.EOF {
			b.failed = err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	b.read += int64(n)
	if err != nil && err != io.EOF {
		b.failed = err
	}
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
	sent  int64 // bytes read from upstream, hence sent or being sent
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.sent += int64(n)
	return n, err
}

func (b *upstreamBody) Close() error {
	b.once.Do(func() {
		_ = b.resp.CloseBodyStream() // an error here is the client's or upstream's going away
		fasthttp.ReleaseResponse(b.resp)
		b.x.streamedOut = b.sent
		b.g.end(b.x, b.start)
	})
	return nil
}
