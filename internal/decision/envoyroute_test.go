package decision

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// This file builds RateLimitRequests as Envoy's HTTP rate limit filter
// (envoy.filters.http.ratelimit) builds them from a route's rate_limits,
// so that the end-to-end scripts of envoyproxy/ratelimit
// (integration-test/scripts) run without an Envoy binary: Envoy is not
// packaged in the registries this project reaches (see
// docs/decision-service.md).
//
// What Envoy does, per its documentation of route.v3.RateLimit:
//   - each entry of rate_limits gives one descriptor, its entries in the
//     order of the entry's actions;
//   - an action that cannot produce its entry (request_headers without the
//     header, header_value_match that does not match) drops the whole
//     descriptor, not the request;
//   - a request with no descriptor left is not sent to the service;
//   - the descriptors of the entries without apply_on_stream_done are sent
//     when the request arrives, in one RateLimitRequest, and Envoy answers
//     the client 429 if the service says OVER_LIMIT; those with
//     apply_on_stream_done are sent when the stream ends, and their answer
//     is not enforced;
//   - an entry's hits_addend becomes the descriptor's hits_addend.

// envoyAction is one action of a rate_limits entry; exactly one field is set.
type envoyAction struct {
	requestHeader      *headerAction     // request_headers: {header_name, descriptor_key}
	remoteAddress      bool              // remote_address: {} -> ("remote_address", client address)
	genericKey         *genericKeyAction // generic_key: {descriptor_key, descriptor_value}
	headerValueMatch   *headerMatchAction
	sourceCluster      bool // source_cluster: {} -> ("source_cluster", Envoy's --service-cluster)
	destinationCluster bool // destination_cluster: {} -> ("destination_cluster", the route's cluster)
}

type headerAction struct{ header, key string }

// genericKeyAction's key defaults to "generic_key", as in Envoy.
type genericKeyAction struct{ key, value string }

// headerMatchAction is header_value_match with one exact header matcher:
// ("header_match", value) when the header equals exact (or, with
// expectMatch false, when it does not).
type headerMatchAction struct {
	value, header, exact string
	expectMatch          bool
}

// envoyRateLimit is one entry of a route's rate_limits.
type envoyRateLimit struct {
	actions           []envoyAction
	hitsAddend        *uint64 // hits_addend: {number: N}
	applyOnStreamDone bool
}

// envoyRoute is a route with its cluster and rate_limits; the filter's
// domain is given per proxy.
type envoyRoute struct {
	cluster string
	limits  []envoyRateLimit
}

// envoyProxy is an Envoy listener with the rate limit filter, its routes
// matched by path prefix, in front of a decision service.
type envoyProxy struct {
	domain, serviceCluster string
	routes                 map[string]envoyRoute // by path prefix
	rls                    rlspb.RateLimitServiceClient
}

// clientRequest is what a client sends through Envoy.
type clientRequest struct {
	path       string
	headers    map[string]string
	remoteAddr string
}

func (p *envoyProxy) route(t *testing.T, path string) envoyRoute {
	t.Helper()
	best := ""
	for prefix := range p.routes {
		if strings.HasPrefix(path, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		t.Fatalf("no route for %s", path)
	}
	return p.routes[best]
}

// descriptors builds the descriptors of the entries whose
// apply_on_stream_done is streamDone.
func (p *envoyProxy) descriptors(rt envoyRoute, req clientRequest, streamDone bool) []*rlpb.RateLimitDescriptor {
	var out []*rlpb.RateLimitDescriptor
	header := func(name string) (string, bool) {
		for k, v := range req.headers {
			if strings.EqualFold(k, name) {
				return v, true
			}
		}
		return "", false
	}
entries:
	for _, rl := range rt.limits {
		if rl.applyOnStreamDone != streamDone {
			continue
		}
		d := &rlpb.RateLimitDescriptor{}
		add := func(k, v string) {
			d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		for _, a := range rl.actions {
			switch {
			case a.requestHeader != nil:
				v, ok := header(a.requestHeader.header)
				if !ok {
					continue entries
				}
				add(a.requestHeader.key, v)
			case a.remoteAddress:
				add("remote_address", req.remoteAddr)
			case a.genericKey != nil:
				k := a.genericKey.key
				if k == "" {
					k = "generic_key"
				}
				add(k, a.genericKey.value)
			case a.headerValueMatch != nil:
				m := a.headerValueMatch
				v, ok := header(m.header)
				if (ok && v == m.exact) != m.expectMatch {
					continue entries
				}
				add("header_match", m.value)
			case a.sourceCluster:
				add("source_cluster", p.serviceCluster)
			case a.destinationCluster:
				add("destination_cluster", rt.cluster)
			}
		}
		if rl.hitsAddend != nil {
			d.HitsAddend = wrapperspb.UInt64(*rl.hitsAddend)
		}
		out = append(out, d)
	}
	return out
}

// do sends req through the proxy: the request-time call decides 200 or
// 429 (a request without descriptors is not checked), then the stream-done
// call is made and its answer dropped. A failed call fails the test rather
// than being let through (the scripts' failure_mode_deny: false would hide
// it). It returns the status and the request-time answer (nil if none).
func (p *envoyProxy) do(t *testing.T, req clientRequest) (int, *rlspb.RateLimitResponse) {
	t.Helper()
	rt := p.route(t, req.path)
	code, resp := http.StatusOK, (*rlspb.RateLimitResponse)(nil)
	if ds := p.descriptors(rt, req, false); len(ds) > 0 {
		resp = p.call(t, ds)
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			code = http.StatusTooManyRequests
		}
	}
	if code == http.StatusOK {
		if ds := p.descriptors(rt, req, true); len(ds) > 0 {
			p.call(t, ds)
		}
	}
	return code, resp
}

func (p *envoyProxy) call(t *testing.T, ds []*rlpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: p.domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", ds, err)
	}
	return resp
}
