package gateway

import (
	"net/netip"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// Header names in fasthttp's canonical form, for the *Canonical methods of
// fasthttp's headers: Set, Peek and Del normalize their key on every call
// (copy and case-fold), which the proxy path would otherwise pay for about
// twenty times per request. TestCanonicalHeaderNames checks each against
// fasthttp's own normalization.
var (
	hdrConnection         = []byte("Connection")
	hdrUpgrade            = []byte("Upgrade")
	hdrXForwardedFor      = []byte("X-Forwarded-For")
	hdrXForwardedProto    = []byte("X-Forwarded-Proto")
	hdrXForwardedHost     = []byte("X-Forwarded-Host")
	hdrXForwardedPort     = []byte("X-Forwarded-Port")
	hdrXForwardedPath     = []byte("X-Forwarded-Path")
	hdrXForwardedPrefix   = []byte("X-Forwarded-Prefix")
	hdrXRealIP            = []byte("X-Real-Ip")
	hdrKongUpstreamLat    = []byte("X-Kong-Upstream-Latency")
	hdrKongProxyLat       = []byte("X-Kong-Proxy-Latency")
	hdrKongResponseLat    = []byte("X-Kong-Response-Latency")
	hdrKongRequestID      = []byte("X-Kong-Request-Id")
	hdrLocation           = []byte("Location")
	canonicalHeaderChecks = [][]byte{hdrConnection, hdrUpgrade, hdrXForwardedFor, hdrXForwardedProto,
		hdrXForwardedHost, hdrXForwardedPort, hdrXForwardedPath, hdrXForwardedPrefix, hdrXRealIP,
		hdrKongUpstreamLat, hdrKongProxyLat, hdrKongResponseLat, hdrKongRequestID, hdrLocation}

	protoHTTP  = []byte("http")
	protoHTTPS = []byte("https")
)

// hopHeaders are removed in both directions (RFC 9110 7.6.1), with every
// header named in Connection.
var hopHeaders = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Upgrade",
	"Proxy-Authenticate", "Proxy-Authorization",
}

// delHopHeaders removes from h the hop-by-hop headers present (bit i of
// present for hopHeaders[i]) and those named in Connection. A fasthttp
// Del costs a key normalization and a scan of every header, so the callers
// scan the headers once (requestHops, responseHops) and only those present
// are deleted, in the same order as deleting every name would (fasthttp's
// Del moves the last header into the deleted one's place, so the order of
// deletions shows in the order of the remaining headers).
func delHopHeaders(h interface {
	PeekCanonical(key []byte) []byte
	Del(key string)
}, present uint) {
	if present == 0 {
		return
	}
	if present&1 != 0 { // hopHeaders[0] is Connection
		for _, name := range connectionTokens(h.PeekCanonical(hdrConnection)) {
			h.Del(name)
		}
	}
	for i := range hopHeaders {
		if present&(1<<i) != 0 {
			h.Del(hopHeaders[i])
		}
	}
}

// allHops makes delHopHeaders delete every hop-by-hop name.
const allHops = 1<<len(hopHeaders) - 1

// requestHops returns which hop-by-hop headers h has, for delHopHeaders.
// A chunked body may have brought trailers, which All does not list, so
// it then reports every one.
func requestHops(h *fasthttp.RequestHeader) uint {
	if h.ContentLength() == -1 {
		return allHops
	}
	var present uint
	for k := range h.All() {
		if i := hopIndex(k); i >= 0 {
			present |= 1 << i
		}
	}
	return present
}

// responseHops returns which hop-by-hop headers h has, and whether it has
// a header that one of the plugins' headers set replaces (any case; see
// delReplaced). The trailers of an upstream response are read with its
// body, after the headers are copied, so All lists every header Del would
// see.
func responseHops(h *fasthttp.ResponseHeader, set [][2]string) (present uint, replaces bool) {
	var lens uint64 // bit n: a name of set is n bytes long; bit 0: one is 64 or more
	for _, kv := range set {
		if n := len(kv[0]); n < 64 {
			lens |= 1 << n
		} else {
			lens |= 1
		}
	}
	for k := range h.All() {
		if i := hopIndex(k); i >= 0 {
			present |= 1 << i
		}
		if lens != 0 && !replaces && (lens&1 != 0 || len(k) < 64 && lens&(1<<len(k)) != 0) {
			replaces = named(k, set)
		}
	}
	return present, replaces
}

// hasRequestHeader reports whether h has the header name (canonical),
// even with an empty value.
func hasRequestHeader(h *fasthttp.RequestHeader, name []byte) bool {
	for k := range h.All() {
		if string(k) == string(name) {
			return true
		}
	}
	return false
}

// hopIndex returns the index of name in hopHeaders (any case), or -1.
// It runs for every header of every request and response, so it looks
// only at the names of name's length.
func hopIndex(name []byte) int {
	var a, b int // candidates in hopHeaders
	switch len(name) {
	case 2:
		a, b = 3, 3 // TE
	case 7:
		a, b = 4, 5 // Trailer, Upgrade
	case 10:
		a, b = 0, 1 // Connection, Keep-Alive
	case 16:
		a, b = 2, 2 // Proxy-Connection
	case 18:
		a, b = 6, 6 // Proxy-Authenticate
	case 19:
		a, b = 7, 7 // Proxy-Authorization
	default:
		return -1
	}
	if equalFoldASCII(name, hopHeaders[a]) {
		return a
	}
	if b != a && equalFoldASCII(name, hopHeaders[b]) {
		return b
	}
	return -1
}

// equalFoldASCII reports whether b and s are equal under ASCII case
// folding (header names are ASCII).
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// appendAddr appends a.String() to b.
func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, "invalid IP"...) // what String returns for the zero Addr
	}
	return a.AppendTo(b)
}

// delReplaced removes from h, a response from upstream, the headers that
// the plugins' headers set replace: those of the same names in any case
// (fasthttp has normalized the upstream's names, and SetCanonical, which
// sets the plugins' headers with their own case, matches names exactly).
// Upstreams rarely send one: responseHops tells when to call it.
func delReplaced(h *fasthttp.ResponseHeader, set [][2]string) {
	var found []string
	for k := range h.All() {
		if named(k, set) {
			found = append(found, string(k))
		}
	}
	for _, name := range found {
		h.Del(name)
	}
}

// named reports whether name is one of the names of set, in any case.
func named(name []byte, set [][2]string) bool {
	for _, kv := range set {
		if equalFoldASCII(name, kv[0]) {
			return true
		}
	}
	return false
}

// bytesOf returns the bytes of s without copying them, for fasthttp
// methods that only read their arguments. They must not be modified.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

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
