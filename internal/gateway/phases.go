package gateway

import (
	"io"
	"strings"

	"github.com/valyala/fasthttp"
)

// A ResponseFilter is a Plugin that also changes the response before it
// is sent: Kong's header_filter and body_filter phases. Filter runs, in
// the chain's priority order, for every plugin of the route's chain that
// applies to the request, also when a plugin answered the request itself
// (as Kong runs the response phases of the plugins whose access phase a
// kong.response.exit skipped). It does not run for a tunnelled upgrade.
//
// x.ctx.Response holds the response: its status, its headers (upstream's
// with the plugins' headers applied) and, when WantsBody asked for it,
// its whole body.
type ResponseFilter interface {
	Filter(x *Exchange)
}

// A bodyFilter is a ResponseFilter that needs the whole body of some
// upstream responses: the proxy reads it before Filter runs instead of
// streaming it.
type bodyFilter interface {
	wantsBody(contentType []byte) bool
}

// A LogPlugin is a Plugin with a log phase: Log runs once the response is
// done, for every plugin of the chain that applies to the request, also
// when an earlier plugin answered it.
type LogPlugin interface {
	Log(x *Exchange)
}

// maxFilteredBody bounds an upstream body read whole for a body filter;
// a larger one is passed on unchanged (and the filter sees no body).
const maxFilteredBody = 16 << 20

// eachApplied calls f with every instance of x's chain that applies to
// the request, in priority order.
func eachApplied(x *Exchange, f func(in *instance)) {
	if x.chain == nil {
		return
	}
	for _, list := range x.chain.names {
		if in := pick(list, x.Consumer); in != nil {
			f(in)
		}
	}
}

// bodyWanted returns the body filters applying to x, or nil.
func bodyWanted(x *Exchange) []bodyFilter {
	var out []bodyFilter
	eachApplied(x, func(in *instance) {
		if bf, ok := in.plugin.(bodyFilter); ok {
			out = append(out, bf)
		}
	})
	return out
}

// filterResponse runs the response filters of x's chain.
func filterResponse(x *Exchange) {
	eachApplied(x, func(in *instance) {
		if rf, ok := in.plugin.(ResponseFilter); ok {
			rf.Filter(x)
		}
	})
}

// logPhase runs the log phase of x's chain.
func logPhase(x *Exchange) {
	eachApplied(x, func(in *instance) {
		if lp, ok := in.plugin.(LogPlugin); ok {
			lp.Log(x)
		}
	})
}

// readWholeBody reads an upstream body of at most maxFilteredBody bytes
// for a body filter. complete is false when the body is larger: b is then
// its first bytes, and the rest is still in uresp's stream.
func readWholeBody(uresp *fasthttp.Response) (b []byte, complete bool, err error) {
	if n := uresp.Header.ContentLength(); n > maxFilteredBody {
		return nil, false, nil
	}
	b, err = io.ReadAll(io.LimitReader(uresp.BodyStream(), maxFilteredBody+1))
	if err != nil || len(b) > maxFilteredBody {
		return b, false, err
	}
	return b, true, nil
}

// wantsBody reports whether one of fs needs a body of contentType.
func wantsBody(fs []bodyFilter, contentType []byte) bool {
	for _, f := range fs {
		if f.wantsBody(contentType) {
			return true
		}
	}
	return false
}

// dropResponseHeader removes a header set with SetResponseHeader.
func (x *Exchange) dropResponseHeader(name string) {
	for i := range x.respHeaders {
		if strings.EqualFold(x.respHeaders[i][0], name) {
			x.respHeaders = append(x.respHeaders[:i], x.respHeaders[i+1:]...)
			return
		}
	}
}
