package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Defaults of HeaderBuffers: nginx's (and Kong's)
// large_client_header_buffers 4 8k.
const (
	DefaultHeaderBuffers    = 4
	DefaultHeaderBufferSize = 8 << 10
)

// HeaderBuffers is nginx's large_client_header_buffers (Kong's
// nginx_http_large_client_header_buffers): the request line and each
// header line must fit in Size bytes, the whole header block in
// Number × Size. The zero value means 4 × 8 KiB.
type HeaderBuffers struct {
	Number int
	Size   int
}

// ParseHeaderBuffers reads nginx's "number size" syntax ("4 8k", "8
// 24k", "2 1m"; sizes in bytes, k or m).
func ParseHeaderBuffers(s string) (HeaderBuffers, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return HeaderBuffers{}, fmt.Errorf("gateway: large_client_header_buffers %q: want a number and a size (\"4 8k\")", s)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1 {
		return HeaderBuffers{}, fmt.Errorf("gateway: large_client_header_buffers %q: the number of buffers must be a positive integer", s)
	}
	size, err := ParseNginxSize(f[1])
	if err != nil {
		return HeaderBuffers{}, fmt.Errorf("gateway: large_client_header_buffers %q: %w", s, err)
	}
	if size < 1024 {
		// nginx refuses a buffer smaller than a connection's own (1k).
		return HeaderBuffers{}, fmt.Errorf("gateway: large_client_header_buffers %q: the size must be at least 1k", s)
	}
	return HeaderBuffers{Number: n, Size: size}, nil
}

// ParseNginxSize reads an nginx size: bytes, or a number with k or m.
func ParseNginxSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > (1<<30)/mult {
		return 0, errors.New("invalid size (bytes, or a number with k or m: \"8k\")")
	}
	return n * mult, nil
}

func (b HeaderBuffers) orDefault() HeaderBuffers {
	if b.Number <= 0 || b.Size <= 0 {
		return HeaderBuffers{DefaultHeaderBuffers, DefaultHeaderBufferSize}
	}
	return b
}

// Reasons of sluice_client_errors_total.
const (
	clientBadRequest    = "bad_request"
	clientHeaderTooBig  = "header_too_large"
	clientURITooLong    = "uri_too_long"
	clientVersion       = "version_not_supported"
	clientMethod        = "method_not_allowed"
	clientBadBody       = "bad_body"
	clientBodyTooLarge  = "body_too_large"
	clientTimeout       = "timeout"
	clientBareLF        = "bare_lf"
	clientBadHeaderName = "bad_header_name"
)

// clientError counts a request refused for the client's mistake.
func (g *Gateway) clientError(reason string) { g.metrics.clientErrors.WithLabelValues(reason).Inc() }

// checkRequest applies nginx's rules to a parsed request before routing:
// it returns the status, Kong's message and the metric reason of the
// answer, or 0 when the request is fine.
func (g *Gateway) checkRequest(ctx *fasthttp.RequestCtx) (int, string, string) {
	if bridged(ctx) {
		return 0, "", "" // HTTP/2, parsed and checked by net/http
	}
	h := &ctx.Request.Header
	if p := h.Protocol(); !bytes.Equal(p, strHTTP11) && !bytes.Equal(p, strHTTP10) {
		if status := checkVersion(p); status != 0 {
			if status == fasthttp.StatusHTTPVersionNotSupported {
				return status, "HTTP version not supported", clientVersion
			}
			return status, "Bad request", clientBadRequest
		}
	}
	if bytes.Equal(h.Method(), strTRACE) {
		return fasthttp.StatusMethodNotAllowed, "Method not allowed", clientMethod
	}
	size := g.headerBuffers.Size
	if len(h.Method())+len(h.RequestURI())+len(h.Protocol())+4 > max(size, g.headerFirst) {
		return fasthttp.StatusRequestURITooLong, "URI too long", clientURITooLong
	}
	raw := h.RawHeaders()
	if len(raw) > size {
		for line := range bytes.SplitSeq(raw, []byte("\n")) {
			if len(line) > size {
				// nginx's 494, which Kong answers as 400.
				return fasthttp.StatusBadRequest, "Request header or cookie too large", clientHeaderTooBig
			}
		}
	}
	for k := range h.All() {
		if !validToken(k) {
			return fasthttp.StatusBadRequest, "Bad request", clientBadHeaderName
		}
	}
	return 0, "", ""
}

var (
	strHTTP11 = []byte("HTTP/1.1")
	strHTTP10 = []byte("HTTP/1.0")
	strTRACE  = []byte("TRACE")
)

// checkVersion is nginx's rule for a request line's version: HTTP/1.x
// is served (any minor version), a major version above 1 gets 505, and
// anything else 400.
func checkVersion(p []byte) int {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/"))
	major, minor, ok2 := bytes.Cut(rest, []byte("."))
	if !ok || !ok2 || !digits(major) || !digits(minor) {
		return fasthttp.StatusBadRequest
	}
	if m, _ := strconv.Atoi(string(major)); m != 1 {
		if m > 1 {
			return fasthttp.StatusHTTPVersionNotSupported
		}
		return fasthttp.StatusBadRequest
	}
	return 0
}

func digits(b []byte) bool {
	if len(b) == 0 || len(b) > 3 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// tokenChars marks the bytes of an RFC 9110 token (header names).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func validToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

// bridged reports whether ctx is an HTTP/2 request bridged from net/http.
func bridged(ctx *fasthttp.RequestCtx) bool {
	_, ok := ctx.Conn().(h2Conn)
	return ok
}
