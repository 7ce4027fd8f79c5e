package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/gateway/router"
	"github.com/seed-008287da/sluice/internal/kongpath"
	"github.com/seed-008287da/sluice/policy"
)

const jsonType = "application/json; charset=utf-8"

// An Exchange is one request as plugins see it: read accessors for the
// request, the matched route, the client and the authenticated consumer,
// and the few changes plugins make (answer the request, add response
// headers, remove a credential before proxying, run code when the response
// has ended). It is valid only during the request; plugins must not keep
// it: once the request has ended, the gateway reuses it for another one.
type Exchange struct {
	ctx     *fasthttp.RequestCtx
	Context context.Context
	// Now is the decision time of the request.
	Now      time.Time
	Route    *kongconf.Route
	Service  *kongconf.Service
	Match    router.Match
	ClientIP netip.Addr
	// Consumer is set by an authentication plugin; nil when anonymous.
	Consumer *kongconf.Consumer
	// Credential is the id of the credential that authenticated the
	// consumer, or "".
	Credential string
	// Identifier is a composite key set by the sluice-dimensions plugin for
	// the rate-limiting plugins that run after it, or "".
	Identifier string
	// Quota, when it has limits, replaces the limits of the
	// rate-limiting-advanced plugins for this request (policy.Request's
	// Quota): the quota override sluice-dimensions found for the key.
	Quota policy.Quota

	gen             *generation
	chain           *chain
	peer            netip.Addr // the TCP peer (behind PROXY protocol, the proxy)
	peerTrusted     bool       // peer is a trusted proxy
	proxied         bool
	upstreamLatency time.Duration
	proxyLatency    time.Duration
	logMethod       string
	logHost         string
	logPath         string
	storeErrs       []error
	respHeaders     [][2]string
	hdrBuf          [8][2]string // backs respHeaders for the usual few headers
	responded       bool
	onEnd           []func()
	plugins         []pluginOutcome
	pluginBuf       [4]pluginOutcome // backs plugins for the usual few
	denial          denial           // the limit that answered 429, for the access log
	chunkedIn       int64            // bytes read of a chunked request body
	streamedOut     int64            // bytes sent of a streamed response body; -1 while not streamed

	requestID    [32]byte // RequestID's bytes, for the response header
	requestIDLen int

	// Scratch for the rate-limiting plugins: a policy.Request and its
	// headers, so that a decision allocates neither.
	polReq policy.Request
	polHdr [8]policy.Header

	// Kept when the Exchange is reused (see release). header is x.Header
	// bound once: a method value made per request would be allocated.
	// path and ipStr are the strings of the last request path and client
	// address, reused while they repeat (strings are immutable, so a
	// plugin that kept one still sees its own request's value).
	header func(string) string
	path   string
	ipStr  string
	ipAddr netip.Addr
	body   []byte // a buffered upstream body (bufferBody)

	// wantBody are the body filters of the request's chain, which the
	// proxy reads whole bodies for; bodyUnfiltered is set when a body was
	// too large for them. bodyLimit, when bodyLimited, bounds a chunked
	// request body below the server's limit (request-size-limiting).
	wantBody       []bodyFilter
	bodyUnfiltered bool
	bodyLimit      int64
	bodyLimited    bool
	tunnelled      bool
	corsPreflight  bool // cors answered or passed on a preflight
	// upstreamPath and upstreamHost, when set, replace the path and Host
	// sent upstream (request-transformer's replace.uri and Host header).
	upstreamPath, upstreamHost *string
	start                      time.Time   // when the request arrived
	inBody                     limitedBody // the request body as proxied
	correlationID              string      // set by correlation-id, for the access log
}

// newExchange makes an Exchange for the Gateway's pool of them.
func newExchange() any {
	x := new(Exchange)
	x.header = x.Header
	return x
}

// acquireExchange returns an Exchange from pool for the request in ctx,
// with the given request id (a sequence number, and the time it is
// combined with).
func acquireExchange(pool *sync.Pool, ctx *fasthttp.RequestCtx, now time.Time, seq uint64, start time.Time) *Exchange {
	x := pool.Get().(*Exchange)
	x.ctx, x.Context, x.Now, x.start = ctx, ctx, now, start
	x.respHeaders = x.hdrBuf[:0]
	x.plugins = x.pluginBuf[:0]
	x.streamedOut = -1
	b := strconv.AppendInt(x.requestID[:0], start.UnixNano(), 36)
	b = append(b, '-')
	b = strconv.AppendUint(b, seq, 36)
	x.requestIDLen = copy(x.requestID[:], b) // at most 13+1+13 bytes: in place
	x.setPath(ctx)
	return x
}

// setPath sets x.path to the path of ctx's request as Kong routes it
// (kongpath.Normalize of the path as the client sent it), reusing the
// previous request's string when it is the same.
func (x *Exchange) setPath(ctx *fasthttp.RequestCtx) {
	raw := ctx.Request.URI().PathOriginal()
	switch {
	case len(raw) == 0:
		raw = slash
	case bytes.IndexByte(raw, '%') >= 0 || bytes.IndexByte(raw, '.') >= 0 || bytes.Contains(raw, doubleSlash):
		if x.path = kongpath.Normalize(string(raw)); x.path == "" {
			x.path = "/"
		}
		return
	}
	if string(raw) != x.path {
		x.path = string(raw)
	}
}

var slash, doubleSlash = []byte("/"), []byte("//")

// release clears x, keeping its reusable parts, and returns it to pool.
// Nothing may use x afterwards.
func (x *Exchange) release(pool *sync.Pool) {
	header, path, ipStr, ipAddr, body := x.header, x.path, x.ipStr, x.ipAddr, x.body
	*x = Exchange{}
	x.header, x.path, x.ipStr, x.ipAddr, x.body = header, path, ipStr, ipAddr, body
	pool.Put(x)
}

// denial is the limit a rate-limiting plugin denied a request by.
type denial struct {
	plugin string
	limit  int64
	window time.Duration
}

// DeniedBy records that plugin denied the request by the limit of window,
// for the access log.
func (x *Exchange) DeniedBy(plugin string, limit int64, window time.Duration) {
	x.denial = denial{plugin, limit, window}
}

// RequestID returns the id sent in X-Kong-Request-Id and in error bodies.
func (x *Exchange) RequestID() string { return string(x.requestID[:x.requestIDLen]) }

// clientIP returns ClientIP.String(), reusing the previous request's
// string when the address is the same.
func (x *Exchange) clientIP() string {
	if x.ipStr == "" || x.ipAddr != x.ClientIP {
		x.ipAddr, x.ipStr = x.ClientIP, x.ClientIP.String()
	}
	return x.ipStr
}

type pluginOutcome struct {
	name    string
	outcome string
}

// Method returns the request method.
func (x *Exchange) Method() string { return methodString(x.ctx.Method()) }

// knownMethods are the methods methodString returns without allocating.
var knownMethods = [...]string{
	fasthttp.MethodGet, fasthttp.MethodPost, fasthttp.MethodPut, fasthttp.MethodDelete,
	fasthttp.MethodPatch, fasthttp.MethodHead, fasthttp.MethodOptions,
}

// methodString returns string(m) without allocating for the usual methods.
func methodString(m []byte) string {
	for _, k := range knownMethods {
		if string(m) == k {
			return k
		}
	}
	return string(m)
}

// Path returns the request path (not the stripped upstream path), without
// the query string.
func (x *Exchange) Path() string { return x.path }

// Host returns the Host header.
func (x *Exchange) Host() string { return string(x.ctx.Host()) }

// Header returns the first value of the request header name, or "".
func (x *Exchange) Header(name string) string { return string(x.ctx.Request.Header.Peek(name)) }

// Query returns the first value of the query argument name, or "".
func (x *Exchange) Query(name string) string { return string(x.ctx.QueryArgs().Peek(name)) }

// HasQuery reports whether the query argument name is present.
func (x *Exchange) HasQuery(name string) bool { return x.ctx.QueryArgs().Has(name) }

// DelHeader removes a request header before the request is proxied.
func (x *Exchange) DelHeader(name string) { x.ctx.Request.Header.Del(name) }

// DelQuery removes a query argument before the request is proxied.
func (x *Exchange) DelQuery(name string) {
	x.ctx.QueryArgs().Del(name)
	x.ctx.Request.URI().SetQueryStringBytes(x.ctx.QueryArgs().QueryString())
}

// SetUpstreamHeader sets a request header sent upstream.
func (x *Exchange) SetUpstreamHeader(name, value string) { x.ctx.Request.Header.Set(name, value) }

// SetResponseHeader sets a header of the response, as Kong's
// kong.response.set_header does: it replaces a header of the same name
// (in any case) from upstream or from an earlier call, and goes on the
// wire with name as given ("X-RateLimit-Limit-Minute", not fasthttp's
// "X-Ratelimit-Limit-Minute"). Headers keep the order they were first set
// in. The name must be a valid header name and the value must not hold a
// line break (both come from the plugins' code and config, which are
// validated).
func (x *Exchange) SetResponseHeader(name, value string) {
	for i := range x.respHeaders {
		if old := x.respHeaders[i][0]; len(old) == len(name) && strings.EqualFold(old, name) {
			x.respHeaders[i] = [2]string{name, value} // the later spelling, as Kong's later set
			return
		}
	}
	x.respHeaders = append(x.respHeaders, [2]string{name, value})
}

// Respond answers the request with status and body instead of proxying
// it. Headers set with SetResponseHeader are sent too. Later plugins do
// not run.
func (x *Exchange) Respond(status int, contentType string, body []byte) {
	x.responded = true
	x.ctx.Response.Reset()
	x.ctx.SetStatusCode(status)
	if contentType != "" {
		x.ctx.SetContentType(contentType)
	}
	x.ctx.SetBody(body)
}

// RespondError answers with Kong's JSON error body
// {"message":"...","request_id":"..."}.
func (x *Exchange) RespondError(status int, message string) {
	x.Respond(status, jsonType, kongErrorBody(message, x.RequestID()))
}

// OnEnd registers f to run once the response has been sent, or the client
// went away, or the request failed: the log phase. Functions run in
// registration order.
func (x *Exchange) OnEnd(f func()) { x.onEnd = append(x.onEnd, f) }

// Outcome records a plugin decision for metrics and the access log
// ("allowed", "denied", "error", ...).
func (x *Exchange) Outcome(plugin, outcome string) {
	x.plugins = append(x.plugins, pluginOutcome{plugin, outcome})
}

// StoreError reports a counter store failure that the plugin survived
// (it decided locally or allowed the request): it is logged and counted,
// and the request goes on.
func (x *Exchange) StoreError(plugin string, err error) {
	x.storeErrs = append(x.storeErrs, fmt.Errorf("%s: %w", plugin, err))
}

func kongErrorBody(message, requestID string) []byte {
	type body struct {
		Message   string `json:"message"`
		RequestID string `json:"request_id,omitempty"`
	}
	b, _ := json.Marshal(body{message, requestID}) // cannot fail for two strings
	return b
}
