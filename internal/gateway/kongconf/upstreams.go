package kongconf

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
)

// An Upstream is a load-balanced set of Targets. A Service whose host is
// the upstream's name is proxied to its targets (Service.Upstream).
type Upstream struct {
	ID   string
	Name string
	// Algorithm is round-robin (the default), consistent-hashing,
	// least-connections or latency.
	Algorithm string
	// HashOn and HashFallback are what consistent-hashing hashes: none,
	// consumer, ip, header, cookie, path, query_arg or uri_capture; the
	// fields below name the header, cookie, argument or capture.
	HashOn, HashFallback                     string
	HashOnHeader, HashFallbackHeader         string
	HashOnCookie, HashOnCookiePath           string
	HashOnQueryArg, HashFallbackQueryArg     string
	HashOnURICapture, HashFallbackURICapture string
	Slots                                    int
	HostHeader                               string
	// ClientCertificate is presented to targets over https (mutual TLS)
	// when the service sets none of its own.
	ClientCertificate *Certificate
	Healthchecks      Healthchecks
	Targets           []*Target
	Tags              []string
	Where             string
}

// Healthchecks are an upstream's active and passive health checks.
// Threshold is the percentage of healthy target weight below which the
// whole upstream is unhealthy (0 disables it).
type Healthchecks struct {
	Active    ActiveHealthcheck
	Passive   PassiveHealthcheck
	Threshold float64
}

// ActiveHealthcheck probes targets. An interval of 0 disables probing of
// targets in that state; a count of 0 disables that transition.
type ActiveHealthcheck struct {
	// Type is http, https or tcp.
	Type                   string
	Timeout                time.Duration
	Concurrency            int
	HTTPPath               string
	HTTPSSNI               string
	HTTPSVerifyCertificate bool
	Headers                map[string][]string
	Healthy                HealthyRule
	Unhealthy              UnhealthyRule
}

// PassiveHealthcheck counts outcomes of proxied requests.
type PassiveHealthcheck struct {
	Type      string
	Healthy   HealthyRule
	Unhealthy UnhealthyRule
}

// HealthyRule says when a target becomes healthy: after Successes
// consecutive responses with one of HTTPStatuses.
type HealthyRule struct {
	Interval     time.Duration
	HTTPStatuses []int
	Successes    int
}

// UnhealthyRule says when a target becomes unhealthy: after that many
// consecutive TCP failures, timeouts or responses with one of
// HTTPStatuses.
type UnhealthyRule struct {
	Interval     time.Duration
	HTTPStatuses []int
	TCPFailures  int
	Timeouts     int
	HTTPFailures int
}

// A Target is one address of an upstream. Weight 0 disables it.
type Target struct {
	ID       string
	Target   string // host:port as configured (port defaulted)
	Host     string
	Port     int
	Weight   int
	Upstream *Upstream
	Tags     []string
	Where    string
}

// Addr returns host:port.
func (t *Target) Addr() string { return joinHostPort(t.Host, t.Port) }

type pendingTarget struct {
	t    *Target
	ref  string
	path string
}

var hashKinds = []string{"none", "consumer", "ip", "header", "cookie", "path", "query_arg", "uri_capture"}

// upstreamEntities reads upstreams and targets.
func (p *parser) upstreamEntities(root *obj) {
	for i, v := range root.list("upstreams") {
		p.upstream(v, index("upstreams", i))
	}
	for i, v := range root.list("targets") {
		p.target(v, index("targets", i), nil)
	}
}

func oneOf(o *obj, name, def string, allowed ...string) string {
	v := o.str(name)
	if v == "" {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	o.errs.add(o.field(name), "expected one of: %s", strings.Join(allowed, ", "))
	return def
}

func (p *parser) upstream(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	u := &Upstream{
		ID:    o.str("id"),
		Name:  o.str("name"),
		Tags:  o.strList("tags"),
		Where: path,
	}
	o.get("created_at")
	o.get("updated_at")
	u.Algorithm = oneOf(o, "algorithm", "round-robin", "consistent-hashing", "least-connections", "round-robin", "latency")
	u.HashOn = oneOf(o, "hash_on", "none", hashKinds...)
	u.HashFallback = oneOf(o, "hash_fallback", "none", hashKinds...)
	u.HashOnHeader = o.str("hash_on_header")
	u.HashFallbackHeader = o.str("hash_fallback_header")
	u.HashOnCookie = o.str("hash_on_cookie")
	u.HashOnCookiePath = o.str("hash_on_cookie_path")
	if u.HashOnCookiePath == "" {
		u.HashOnCookiePath = "/"
	} else if !strings.HasPrefix(u.HashOnCookiePath, "/") {
		p.errs.add(o.field("hash_on_cookie_path"), "should start with: /")
	}
	u.HashOnQueryArg = o.str("hash_on_query_arg")
	u.HashFallbackQueryArg = o.str("hash_fallback_query_arg")
	u.HashOnURICapture = o.str("hash_on_uri_capture")
	u.HashFallbackURICapture = o.str("hash_fallback_uri_capture")
	u.Slots = int(o.integer("slots", 10000, 10, 1<<16))
	u.HostHeader = o.str("host_header")
	if u.HostHeader != "" && !validHost(strings.ToLower(u.HostHeader)) {
		p.errs.add(o.field("host_header"), "invalid hostname %q", u.HostHeader)
	}
	if ref := o.ref("client_certificate"); ref != "" {
		p.upClientRefs = append(p.upClientRefs, pendingRef[*Upstream]{u, ref, o.field("client_certificate")})
	}
	if o.boolean("use_srv_name", false) {
		p.errs.add(o.field("use_srv_name"), "not supported by sluice: DNS SRV targets are not resolved")
	}
	p.checkUpstreamName(u, o)
	p.checkHashing(u, o)
	if hv, ok := o.get("healthchecks"); ok {
		if ho := asObj(hv, o.field("healthchecks"), p.errs); ho != nil {
			u.Healthchecks = p.healthchecks(ho)
		}
	} else {
		u.Healthchecks = p.healthchecks(&obj{path: o.field("healthchecks"), m: map[string]any{}, seen: map[string]bool{}, errs: p.errs})
	}
	if u.ID == "" {
		u.ID = p.genID("upstream", u.Name)
	}
	p.cfg.Upstreams = append(p.cfg.Upstreams, u)
	for i, t := range o.list("targets") {
		p.target(t, index(o.field("targets"), i), u)
	}
	o.finish()
}

func (p *parser) checkUpstreamName(u *Upstream, o *obj) {
	switch {
	case u.Name == "":
		p.errs.add(o.field("name"), "required field missing")
	case strings.Contains(u.Name, ":") && !strings.HasPrefix(u.Name, "["):
		if _, err := netip.ParseAddr(u.Name); err == nil {
			p.errs.add(o.field("name"), "Invalid name ('%s'); no ip addresses allowed", u.Name)
		} else {
			p.errs.add(o.field("name"), "Invalid name ('%s'); no port allowed", u.Name)
		}
	default:
		if _, err := netip.ParseAddr(strings.Trim(u.Name, "[]")); err == nil {
			p.errs.add(o.field("name"), "Invalid name ('%s'); no ip addresses allowed", u.Name)
		} else if !validHost(strings.ToLower(u.Name)) || strings.Contains(u.Name, "*") {
			p.errs.add(o.field("name"), "Invalid name ('%s'); must be a valid hostname", u.Name)
		}
	}
}

// checkHashing applies Kong's rules between hash_on, hash_fallback and
// the fields they need.
func (p *parser) checkHashing(u *Upstream, o *obj) {
	need := func(kind, fieldName, value string) {
		if value == "" {
			p.errs.add(o.field(fieldName), "required field missing (hash %s needs it)", strings.ReplaceAll(kind, "_", " "))
		}
	}
	for _, side := range []struct{ kind, header, query, capture string }{
		{u.HashOn, "hash_on_header", "hash_on_query_arg", "hash_on_uri_capture"},
		{u.HashFallback, "hash_fallback_header", "hash_fallback_query_arg", "hash_fallback_uri_capture"},
	} {
		switch side.kind {
		case "header":
			need("header", side.header, map[string]string{"hash_on_header": u.HashOnHeader, "hash_fallback_header": u.HashFallbackHeader}[side.header])
		case "cookie":
			need("cookie", "hash_on_cookie", u.HashOnCookie)
		case "query_arg":
			need("query_arg", side.query, map[string]string{"hash_on_query_arg": u.HashOnQueryArg, "hash_fallback_query_arg": u.HashFallbackQueryArg}[side.query])
		case "uri_capture":
			need("uri_capture", side.capture, map[string]string{"hash_on_uri_capture": u.HashOnURICapture, "hash_fallback_uri_capture": u.HashFallbackURICapture}[side.capture])
		}
	}
	switch {
	case u.HashOn == "none" && u.HashFallback != "none":
		p.errs.add(o.field("hash_fallback"), "expected one of: none (hash_on is none)")
	case u.HashOn == "cookie" && u.HashFallback != "none":
		p.errs.add(o.field("hash_fallback"), "expected one of: none (hash_on is cookie)")
	case u.HashOn == u.HashFallback && u.HashOn != "none" && u.HashOn != "header" && u.HashOn != "query_arg" && u.HashOn != "uri_capture":
		p.errs.add(o.field("hash_fallback"), "must not be the same as hash_on")
	}
	if u.HashOn == "header" && u.HashFallback == "header" && u.HashOnHeader != "" && strings.EqualFold(u.HashOnHeader, u.HashFallbackHeader) {
		p.errs.add(o.field("hash_fallback_header"), "values of these fields must be distinct: 'hash_on_header', 'hash_fallback_header'")
	}
	if u.HashOn == "query_arg" && u.HashFallback == "query_arg" && u.HashOnQueryArg != "" && u.HashOnQueryArg == u.HashFallbackQueryArg {
		p.errs.add(o.field("hash_fallback_query_arg"), "values of these fields must be distinct: 'hash_on_query_arg', 'hash_fallback_query_arg'")
	}
	if u.HashOn == "uri_capture" && u.HashFallback == "uri_capture" && u.HashOnURICapture != "" && u.HashOnURICapture == u.HashFallbackURICapture {
		p.errs.add(o.field("hash_fallback_uri_capture"), "values of these fields must be distinct: 'hash_on_uri_capture', 'hash_fallback_uri_capture'")
	}
}

func seconds(o *obj, name string, def float64) time.Duration {
	v, ok := o.get(name)
	if !ok {
		return time.Duration(def * float64(time.Second))
	}
	f, isNum := toFloat(v)
	if !isNum {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.Number, v))
		return time.Duration(def * float64(time.Second))
	}
	if f < 0 || f > 65535 {
		o.errs.add(o.field(name), "value should be between 0 and 65535")
		return time.Duration(def * float64(time.Second))
	}
	return time.Duration(f * float64(time.Second))
}

func toFloat(v any) (float64, bool) {
	if f, ok := v.(float64); ok {
		return f, true
	}
	n, ok := toInt(v)
	return float64(n), ok
}

func statuses(o *obj, name string, def []int) []int {
	v, ok := o.get(name)
	if !ok {
		return def
	}
	l, isList := v.([]any)
	if !isList {
		o.errs.add(o.field(name), "%s", field.Expected(o.field(name), field.List, v))
		return def
	}
	out := []int{}
	for i, x := range l {
		n, ok := toInt(x)
		if !ok || n < 100 || n > 999 {
			o.errs.add(index(o.field(name), i), "value should be between 100 and 999")
			continue
		}
		out = append(out, int(n))
	}
	return out
}

func sub(o *obj, name string) *obj {
	v, ok := o.get(name)
	if !ok {
		return &obj{path: o.field(name), m: map[string]any{}, seen: map[string]bool{}, errs: o.errs}
	}
	s := asObj(v, o.field(name), o.errs)
	if s == nil {
		return &obj{path: o.field(name), m: map[string]any{}, seen: map[string]bool{}, errs: o.errs}
	}
	return s
}

func count(o *obj, name string) int { return int(o.integer(name, 0, 0, 1<<31)) }

func (p *parser) healthchecks(o *obj) Healthchecks {
	var h Healthchecks
	h.Threshold = float64(0)
	if v, ok := o.get("threshold"); ok {
		f, isNum := toFloat(v)
		switch {
		case !isNum:
			p.errs.add(o.field("threshold"), "%s", field.Expected(o.field("threshold"), field.Number, v))
		case f < 0 || f > 100:
			p.errs.add(o.field("threshold"), "value should be between 0 and 100")
		default:
			h.Threshold = f
		}
	}
	a := sub(o, "active")
	h.Active.Type = oneOf(a, "type", "http", "tcp", "http", "https", "grpc", "grpcs")
	if h.Active.Type == "grpc" || h.Active.Type == "grpcs" {
		p.errs.add(a.field("type"), "not supported by sluice: gRPC health checks are not implemented")
	}
	h.Active.Timeout = seconds(a, "timeout", 1)
	h.Active.Concurrency = int(a.integer("concurrency", 10, 1, 1<<31))
	h.Active.HTTPPath = a.str("http_path")
	if h.Active.HTTPPath == "" {
		h.Active.HTTPPath = "/"
	} else if !strings.HasPrefix(h.Active.HTTPPath, "/") {
		p.errs.add(a.field("http_path"), "should start with: /")
	}
	h.Active.HTTPSSNI = a.str("https_sni")
	h.Active.HTTPSVerifyCertificate = a.boolean("https_verify_certificate", true)
	if hv, ok := a.get("headers"); ok {
		hm, isMap := hv.(map[string]any)
		if !isMap {
			p.errs.add(a.field("headers"), "%s", field.Expected(a.field("headers"), "an object of header names to lists of values", hv))
		}
		for name, vals := range hm {
			l, isList := vals.([]any)
			if !isList {
				p.errs.add(join(a.field("headers"), name), "%s", field.Expected(join(a.field("headers"), name), field.ListOf(field.String), vals))
				continue
			}
			for i, x := range l {
				s, isStr := x.(string)
				if !isStr {
					p.errs.add(index(join(a.field("headers"), name), i), "%s", field.Expected(index(join(a.field("headers"), name), i), field.String, x))
					continue
				}
				if h.Active.Headers == nil {
					h.Active.Headers = map[string][]string{}
				}
				h.Active.Headers[name] = append(h.Active.Headers[name], s)
			}
		}
	}
	ah := sub(a, "healthy")
	h.Active.Healthy = HealthyRule{
		Interval:     seconds(ah, "interval", 0),
		HTTPStatuses: statuses(ah, "http_statuses", []int{200, 302}),
		Successes:    count(ah, "successes"),
	}
	ah.finish()
	au := sub(a, "unhealthy")
	h.Active.Unhealthy = UnhealthyRule{
		Interval:     seconds(au, "interval", 0),
		HTTPStatuses: statuses(au, "http_statuses", []int{429, 404, 500, 501, 502, 503, 504, 505}),
		TCPFailures:  count(au, "tcp_failures"),
		Timeouts:     count(au, "timeouts"),
		HTTPFailures: count(au, "http_failures"),
	}
	au.finish()
	a.finish()
	ps := sub(o, "passive")
	h.Passive.Type = oneOf(ps, "type", "http", "tcp", "http", "https", "grpc", "grpcs")
	if h.Passive.Type == "grpc" || h.Passive.Type == "grpcs" {
		p.errs.add(ps.field("type"), "not supported by sluice: gRPC health checks are not implemented")
	}
	ph := sub(ps, "healthy")
	h.Passive.Healthy = HealthyRule{
		HTTPStatuses: statuses(ph, "http_statuses", []int{200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 306, 307, 308}),
		Successes:    count(ph, "successes"),
	}
	ph.finish()
	pu := sub(ps, "unhealthy")
	h.Passive.Unhealthy = UnhealthyRule{
		HTTPStatuses: statuses(pu, "http_statuses", []int{429, 500, 503}),
		TCPFailures:  count(pu, "tcp_failures"),
		Timeouts:     count(pu, "timeouts"),
		HTTPFailures: count(pu, "http_failures"),
	}
	pu.finish()
	ps.finish()
	o.finish()
	return h
}

func (p *parser) target(v any, path string, u *Upstream) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	t := &Target{ID: o.str("id"), Weight: int(o.integer("weight", 100, 0, 65535)), Tags: o.strList("tags"), Where: path, Upstream: u}
	o.get("created_at")
	o.get("updated_at")
	raw := o.str("target")
	if raw == "" {
		p.errs.add(o.field("target"), "required field missing")
	} else if host, port, ok := splitTarget(raw); !ok {
		p.errs.add(o.field("target"), "Invalid target ('%s'); not a valid hostname or ip address", raw)
	} else {
		t.Host, t.Port = host, port
		t.Target = joinHostPort(host, port)
	}
	if u != nil {
		if o.has("upstream") {
			p.errs.add(o.field("upstream"), "a nested target belongs to its upstream already")
		}
		o.get("upstream")
		u.Targets = append(u.Targets, t)
	} else if ref := o.ref("upstream"); ref != "" {
		p.targetRefs = append(p.targetRefs, pendingTarget{t, ref, o.field("upstream")})
	} else if !o.has("upstream") {
		p.errs.add(o.field("upstream"), "required field missing")
	}
	p.cfg.Targets = append(p.cfg.Targets, t)
	o.finish()
}

// splitTarget reads host[:port], the port defaulting to 8000 as Kong's.
func splitTarget(s string) (string, int, bool) {
	host, port := s, 8000
	if h, ps, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, false
		}
		host, port = h, n
	} else if strings.Count(s, ":") > 1 {
		// a bare IPv6 address
		if _, err := netip.ParseAddr(s); err != nil {
			return "", 0, false
		}
		return s, port, true
	}
	host = strings.Trim(host, "[]")
	if _, err := netip.ParseAddr(host); err == nil {
		return host, port, true
	}
	if !validHost(strings.ToLower(host)) || strings.Contains(host, "*") {
		return "", 0, false
	}
	return strings.ToLower(host), port, true
}

// resolveUpstreams links top-level targets and services to upstreams.
func (p *parser) resolveUpstreams() {
	ups := byRef(p.cfg.Upstreams, func(u *Upstream) (string, string) { return u.ID, u.Name })
	for _, r := range p.targetRefs {
		u, ok := ups[r.ref]
		if !ok {
			p.errs.add(r.path, "no upstream named %q", r.ref)
			continue
		}
		r.t.Upstream = u
		u.Targets = append(u.Targets, r.t)
	}
	seen := map[string]string{}
	for i, u := range p.cfg.Upstreams {
		if prev, ok := seen[u.Name]; ok && u.Name != "" {
			p.errs.add(index("upstreams", i)+".name", "duplicate upstream name %q (also at %s)", u.Name, prev)
		}
		seen[u.Name] = index("upstreams", i)
		addrs := map[string]string{}
		for _, t := range u.Targets {
			if t.Target == "" {
				continue
			}
			if prev, ok := addrs[t.Target]; ok {
				p.errs.add(t.Where+".target", "duplicate target %q of upstream %q (also at %s)", t.Target, u.Name, prev)
			}
			addrs[t.Target] = t.Where
			if t.ID == "" {
				t.ID = p.genID("target", u.Name+"\x00"+t.Target)
			}
		}
	}
	certs := byRef(p.cfg.Certificates, func(c *Certificate) (string, string) { return c.ID, "" })
	for _, r := range p.upClientRefs {
		c, ok := certs[r.ref]
		if !ok {
			p.errs.add(r.path, "no certificate with id %q", r.ref)
			continue
		}
		r.ent.ClientCertificate = c
	}
	byName := map[string]*Upstream{}
	for _, u := range p.cfg.Upstreams {
		byName[strings.ToLower(u.Name)] = u
	}
	for _, s := range p.cfg.Services {
		if u, ok := byName[strings.ToLower(s.Host)]; ok {
			s.Upstream = u
		}
	}
}
