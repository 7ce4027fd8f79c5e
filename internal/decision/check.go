package decision

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// CheckConfig configures GET /check, the endpoint made for nginx's
// auth_request and Traefik's forwardAuth: the proxy asks before it
// forwards a request, and sluice answers 200 or DenyStatus with the
// rate-limit headers.
type CheckConfig struct {
	// Domain is the domain every check is decided in; it must be one of
	// the configured domains.
	Domain string
	// Proxy names the proxy that asks, and so which of its forwarding
	// headers describe the original request: ProxyNginx (X-Original-URI,
	// X-Original-Method, X-Forwarded-Host, X-Real-IP) or ProxyTraefik
	// (X-Forwarded-Uri, X-Forwarded-Method, X-Forwarded-Host, the last
	// X-Forwarded-For entry). Each proxy passes the other's headers on from
	// the client unchanged, so only its own are read.
	Proxy string
	// TrustedProxies are the peers whose forwarding headers describe the
	// original request. A check from any other peer is decided on its own
	// method, URI, host and address. Empty means loopback only.
	TrustedProxies []netip.Prefix
	// DenyStatus answers a request over its limit: 403 (the default), which
	// nginx's auth_request acts on (any status but 2xx, 401 and 403 is an
	// error there, a 500 for the client), or 429 for Traefik's forwardAuth,
	// which passes the answer on to the client.
	DenyStatus int
	// FailureModeDeny answers DenyStatus when a check cannot be decided (the
	// store failed); by default such a check is allowed, as Envoy's
	// failure_mode_deny: false.
	FailureModeDeny bool
	// Descriptors are built from each checked request; one whose source is
	// absent from the request (a missing header or query argument) is left
	// out, as Envoy leaves out a rate limit action that does not apply.
	Descriptors [][]CheckEntry
}

// A CheckEntry is one descriptor entry of a check: Key with a fixed Value,
// or with the value taken From the request: client_ip, method, path
// (without the query), host, header:<name> or query:<name>.
type CheckEntry struct {
	Key   string
	Value string
	From  string
}

// The proxies a check section may name.
const (
	ProxyNginx   = "nginx"
	ProxyTraefik = "traefik"
)

// checkSources are the request parts a CheckEntry may take its value from.
var checkSources = []string{"client_ip", "method", "path", "host", "header:<name>", "query:<name>"}

func (d *decoder) check(path string, n *yaml.Node, domains []Domain) *CheckConfig {
	m := d.mapping(path, n)
	if m == nil {
		return nil
	}
	c := &CheckConfig{Domain: m.str("domain"), DenyStatus: http.StatusForbidden, FailureModeDeny: m.boolean("failure_mode_deny")}
	switch {
	case c.Domain == "":
		d.add(m.node, joinPath(path, "domain"), "required")
	case !hasDomain(domains, c.Domain):
		d.add(m.field("domain"), joinPath(path, "domain"), "unknown domain %q", c.Domain)
	}
	switch c.Proxy = m.str("proxy"); c.Proxy {
	case ProxyNginx, ProxyTraefik:
	case "":
		d.add(m.node, joinPath(path, "proxy"), "required: nginx or traefik (whose forwarding headers describe the original request)")
	default:
		d.add(m.field("proxy"), joinPath(path, "proxy"), "expected nginx or traefik, got %q", c.Proxy)
	}
	if v, ok := m.uint32("deny_status"); ok {
		if v < 400 || v > 499 {
			d.add(m.field("deny_status"), joinPath(path, "deny_status"), "expected a 4xx status, got %d", v)
		} else {
			c.DenyStatus = int(v)
		}
	}
	for i, pn := range m.seq("trusted_proxies") {
		p := indexPath(joinPath(path, "trusted_proxies"), i)
		if pn.Kind != yaml.ScalarNode {
			d.mistype(pn, p, "an address or CIDR")
			continue
		}
		pfx, err := parsePrefix(pn.Value)
		if err != nil {
			d.add(pn, p, "expected an address or CIDR, got %q", pn.Value)
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, pfx)
	}
	if len(c.TrustedProxies) == 0 {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	for i, dn := range m.seq("descriptors") {
		p := indexPath(joinPath(path, "descriptors"), i)
		if dn.Kind != yaml.SequenceNode || len(dn.Content) == 0 {
			d.add(dn, p, "expected a non-empty list of entries")
			continue
		}
		var desc []CheckEntry
		for j, en := range dn.Content {
			ep := indexPath(p, j)
			em := d.mapping(ep, en)
			if em == nil {
				continue
			}
			e := CheckEntry{Key: em.str("key"), Value: em.str("value"), From: em.str("from")}
			if e.Key == "" {
				d.add(em.node, joinPath(ep, "key"), "required")
			}
			switch {
			case e.Value == "" && e.From == "":
				d.add(em.node, ep, "give value or from")
			case e.Value != "" && e.From != "":
				d.add(em.field("from"), joinPath(ep, "from"), "must not be given together with value")
			case e.From != "" && !validSource(e.From):
				d.add(em.field("from"), joinPath(ep, "from"), "unknown source %q (want one of %s)", e.From, strings.Join(checkSources, ", "))
			}
			em.done()
			desc = append(desc, e)
		}
		c.Descriptors = append(c.Descriptors, desc)
	}
	if len(c.Descriptors) == 0 {
		d.add(m.node, joinPath(path, "descriptors"), "required: at least one descriptor")
	}
	m.done()
	return c
}

func hasDomain(domains []Domain, name string) bool {
	for _, d := range domains {
		if d.Name == name {
			return true
		}
	}
	return false
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validSource(s string) bool {
	switch s {
	case "client_ip", "method", "path", "host":
		return true
	}
	name, ok := strings.CutPrefix(s, "header:")
	if !ok {
		name, ok = strings.CutPrefix(s, "query:")
	}
	return ok && name != ""
}

// checkedRequest is the original request a proxy asks about.
type checkedRequest struct {
	method, path, host, clientIP string
	query                        url.Values
	header                       http.Header
}

// original reads the request a check is about: from the forwarding
// headers of c.Proxy when the peer is trusted, else from the check request
// itself.
func (c *CheckConfig) original(r *http.Request) checkedRequest {
	peer := remoteAddr(r.RemoteAddr)
	o := checkedRequest{method: r.Method, host: r.Host, clientIP: peer.String(), header: r.Header}
	uri := r.URL.RequestURI()
	if peer.IsValid() && c.trusted(peer) {
		method, uriHeader := "X-Original-Method", "X-Original-URI"
		if c.Proxy == ProxyTraefik {
			method, uriHeader = "X-Forwarded-Method", "X-Forwarded-Uri"
		}
		if v := r.Header.Get(method); v != "" {
			o.method = v
		}
		if v := r.Header.Get(uriHeader); v != "" {
			uri = v
		}
		if v := r.Header.Get("X-Forwarded-Host"); v != "" {
			o.host = v
		}
		if v := r.Header.Get("X-Real-IP"); v != "" && c.Proxy == ProxyNginx {
			o.clientIP = v
		} else if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 {
			// The entry the proxy in front of us appended: the one it saw.
			last := v[len(v)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			o.clientIP = strings.TrimSpace(last)
		}
	}
	o.query = url.Values{}
	p, q, ok := strings.Cut(uri, "?")
	if ok {
		o.query, _ = url.ParseQuery(q) // a malformed pair is left out, as a proxy would read it
	}
	o.path = normalizePath(p)
	if h, _, err := net.SplitHostPort(o.host); err == nil {
		o.host = h
	}
	return o
}

func (c *CheckConfig) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func remoteAddr(s string) netip.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// normalizePath returns the path as nginx routes it ($uri): a raw
// fragment cut off, every percent-encoded byte decoded (%2F too), dot
// segments removed and repeated slashes merged (path.Clean, keeping a
// trailing slash). So /%6Cogin, //login, /a/../login, /%2Flogin and
// /login#x are all checked as /login.
func normalizePath(p string) string {
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	p = b.String()
	c := path.Clean("/" + p)
	if c != "/" && (strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")) {
		c += "/"
	}
	return c
}

// descriptors builds the rate limit descriptors of o.
func (c *CheckConfig) descriptors(o checkedRequest) []*rlpb.RateLimitDescriptor {
	out := make([]*rlpb.RateLimitDescriptor, 0, len(c.Descriptors))
next:
	for _, desc := range c.Descriptors {
		d := &rlpb.RateLimitDescriptor{Entries: make([]*rlpb.RateLimitDescriptor_Entry, 0, len(desc))}
		for _, e := range desc {
			v := e.Value
			if e.From != "" {
				var ok bool
				if v, ok = o.source(e.From); !ok {
					continue next
				}
			}
			d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: e.Key, Value: v})
		}
		out = append(out, d)
	}
	return out
}

// source returns the value of a request part, and false when it is absent.
func (o checkedRequest) source(from string) (string, bool) {
	switch from {
	case "client_ip":
		return o.clientIP, o.clientIP != ""
	case "method":
		return o.method, true
	case "path":
		return o.path, true
	case "host":
		return o.host, o.host != ""
	}
	if name, ok := strings.CutPrefix(from, "header:"); ok {
		v := o.header.Values(name)
		if len(v) == 0 {
			return "", false
		}
		return strings.Join(v, ","), true
	}
	name, _ := strings.CutPrefix(from, "query:")
	if v, ok := o.query[name]; ok && len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// serveCheck answers GET /check (any method: Traefik forwards the
// original one).
func (s *Service) serveCheck(w http.ResponseWriter, r *http.Request) {
	cfg := s.gen.Load().cfg
	if cfg == nil {
		writeError(w, http.StatusServiceUnavailable, ErrNoConfig.Error())
		return
	}
	c := cfg.Check
	if c == nil {
		writeError(w, http.StatusNotFound, "decision: /check is not configured (add a check section)")
		return
	}
	descs := c.descriptors(c.original(r))
	if len(descs) == 0 {
		w.WriteHeader(http.StatusOK) // nothing to limit in this request
		return
	}
	start := time.Now()
	resp, err := s.Decide(r.Context(), &rlspb.RateLimitRequest{Domain: c.Domain, Descriptors: descs}, s.now())
	s.m.observe(viaHTTP, start, resp, err)
	if err != nil {
		s.repeats.Warn("check "+c.Domain, "decision: check failed", "err", err, "failure_mode_deny", c.FailureModeDeny)
		if c.FailureModeDeny {
			w.WriteHeader(c.DenyStatus)
		} else {
			w.WriteHeader(http.StatusOK)
		}
		return
	}
	h := w.Header()
	over := resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT
	if st := closest(resp.Statuses, nil); st != nil {
		limit := strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)
		remaining := strconv.FormatUint(uint64(st.LimitRemaining), 10)
		reset := ceilSeconds(st.DurationUntilReset.AsDuration())
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
		h.Set("RateLimit-Limit", limit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", reset)
		if over {
			h.Set("Retry-After", reset)
		}
	}
	if !over {
		w.WriteHeader(http.StatusOK)
		return
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(c.DenyStatus)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": "API rate limit exceeded"})
}

// ceilSeconds formats d in whole seconds, rounded up, at least 1.
func ceilSeconds(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	return strconv.FormatInt(secs, 10)
}
