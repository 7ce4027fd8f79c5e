// Package router matches requests to Kong routes by host, method and path.
//
// Order, as Kong's traditional_compatible router: a route matching on more
// kinds of attribute (hosts, methods, headers, paths, snis) wins over one matching
// on fewer; then routes whose hosts have no wildcard; then routes matching
// more headers; then regex paths (by
// regex_priority, higher first) before prefix paths (longest first); then
// configuration order. A Router is immutable and safe
// for concurrent use.
package router

import (
	"regexp"
	"sort"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// A Router holds the compiled routes of one configuration.
type Router struct {
	entries []entry
}

type entry struct {
	route    *kongconf.Route
	prefix   string         // "" for a regex or path-less entry
	re       *regexp.Regexp // anchored at the start
	hasPath  bool
	attrs    int  // number of attribute kinds the route matches on
	plain    bool // hosts without wildcards
	order    int
	hosts    []hostPattern
	headers  []headerRule
	methods  []string
	snis     []string
	priority int
}

type headerRule struct {
	name   string
	values []string
	// regexps are the "~*" values compiled (lower-cased, as Kong does),
	// matched against the lower-cased header value.
	regexps []*regexp.Regexp
}

// A HeaderGetter returns the first value of a request header (any case),
// or nil. *fasthttp.RequestHeader is one.
type HeaderGetter interface {
	Peek(key string) []byte
}

type hostPattern struct {
	exact, suffix, prefix string // one is set; suffix for "*.x", prefix for "x.*"
	port                  string // "" matches any port
}

// A Match is the route a request matched.
type Match struct {
	Route *kongconf.Route
	// Path is the request path.
	Path string
	// Prefix is the part of Path the route's path matched: the prefix, or
	// the regex match. Empty for a route without paths.
	Prefix string
	// Captures are the named groups of a regex path match.
	Captures map[string]string
}

// UpstreamPath returns the path to send to the service (Kong's
// path_handling v0): the service path joined with the request path, or
// with what follows the matched prefix when the route strips it.
func (m *Match) UpstreamPath(servicePath string) string {
	strip := m.Route != nil && m.Route.StripPath
	return UpstreamPath(servicePath, m.Path, m.Prefix, strip)
}

// New compiles routes. Route paths are validated by kongconf, so a regex
// that does not compile here is skipped.
func New(routes []*kongconf.Route) *Router {
	r := &Router{}
	for i, rt := range routes {
		if rt.Service != nil && !rt.Service.Enabled {
			continue // Kong leaves the routes of a disabled service out of the router
		}
		attrs := 0
		if len(rt.Hosts) > 0 {
			attrs++
		}
		if len(rt.Methods) > 0 {
			attrs++
		}
		if len(rt.Paths) > 0 {
			attrs++
		}
		if len(rt.Headers) > 0 {
			attrs++
		}
		base := entry{route: rt, attrs: attrs, order: i, methods: rt.Methods, priority: rt.RegexPriority, plain: len(rt.Hosts) > 0}
		if len(rt.SNIs) > 0 {
			base.attrs++
			base.snis = rt.SNIs
		}
		for name, vals := range rt.Headers {
			hr := headerRule{name: name}
			for _, v := range vals {
				if rx, ok := strings.CutPrefix(v, "~*"); ok {
					re, err := regexp.Compile(strings.ToLower(rx))
					if err != nil {
						continue // validated by kongconf
					}
					hr.regexps = append(hr.regexps, re)
					continue
				}
				hr.values = append(hr.values, v)
			}
			base.headers = append(base.headers, hr)
		}
		sort.Slice(base.headers, func(i, j int) bool { return base.headers[i].name < base.headers[j].name })
		for _, h := range rt.Hosts {
			base.hosts = append(base.hosts, compileHost(h))
			if strings.Contains(h, "*") {
				base.plain = false
			}
		}
		if len(rt.Paths) == 0 {
			r.entries = append(r.entries, base)
			continue
		}
		for _, p := range rt.Paths {
			e := base
			e.hasPath = true
			if strings.HasPrefix(p, "~") {
				re, err := regexp.Compile("^(?:" + p[1:] + ")")
				if err != nil {
					continue
				}
				e.re = re
			} else {
				e.prefix = p
			}
			r.entries = append(r.entries, e)
		}
	}
	sort.SliceStable(r.entries, func(i, j int) bool {
		a, b := &r.entries[i], &r.entries[j]
		if a.attrs != b.attrs {
			return a.attrs > b.attrs
		}
		if a.plain != b.plain {
			return a.plain
		}
		if len(a.headers) != len(b.headers) {
			return len(a.headers) > len(b.headers)
		}
		if (a.re != nil) != (b.re != nil) {
			return a.re != nil
		}
		if a.re != nil {
			if a.priority != b.priority {
				return a.priority > b.priority
			}
		} else if len(a.prefix) != len(b.prefix) {
			return len(a.prefix) > len(b.prefix)
		}
		return a.order < b.order
	})
	return r
}

func compileHost(h string) hostPattern {
	var hp hostPattern
	name := h
	if i := strings.LastIndexByte(h, ':'); i > 0 && !strings.Contains(h[i+1:], "]") && strings.Count(h, ":") == 1 {
		name, hp.port = h[:i], h[i+1:]
	}
	switch {
	case strings.HasPrefix(name, "*."):
		hp.suffix = name[1:]
	case strings.HasSuffix(name, ".*"):
		hp.prefix = name[:len(name)-1]
	default:
		hp.exact = name
	}
	return hp
}

func (hp *hostPattern) match(host, port string) bool {
	if hp.port != "" && hp.port != port {
		return false
	}
	switch {
	case hp.exact != "":
		return host == hp.exact
	case hp.suffix != "":
		return len(host) > len(hp.suffix) && strings.HasSuffix(host, hp.suffix)
	default:
		return len(host) > len(hp.prefix) && strings.HasPrefix(host, hp.prefix)
	}
}

// Match finds the route for a request. host is the Host header (any case,
// with or without port), path the request path without the query string,
// h the request headers (nil matches no header rule). It reports false
// when no route matches.
func (r *Router) Match(method, host, path string, h HeaderGetter) (Match, bool) {
	return r.match(method, host, path, false, "", h)
}

// MatchTLS is Match for a request that came over TLS asking for server
// name sni ("" when the client sent none): a route with snis matches only
// when sni is one of them.
func (r *Router) MatchTLS(method, host, path, sni string, h HeaderGetter) (Match, bool) {
	return r.match(method, host, path, true, strings.ToLower(sni), h)
}

func (r *Router) match(method, host, path string, tls bool, sni string, h HeaderGetter) (Match, bool) {
	hostName, port := splitHost(host)
	for i := range r.entries {
		e := &r.entries[i]
		if len(e.methods) > 0 && !contains(e.methods, method) {
			continue
		}
		if tls && len(e.snis) > 0 && !contains(e.snis, sni) {
			continue
		}
		if len(e.hosts) > 0 {
			ok := false
			for j := range e.hosts {
				if e.hosts[j].match(hostName, port) {
					ok = true
					break
				}
			}
			if !ok {
				continue
			}
		}
		if len(e.headers) > 0 && !matchHeaders(e.headers, h) {
			continue
		}
		if !e.hasPath {
			return Match{Route: e.route, Path: path}, true
		}
		if e.re != nil {
			loc := e.re.FindStringSubmatchIndex(path)
			if loc == nil {
				continue
			}
			m := Match{Route: e.route, Path: path, Prefix: path[:loc[1]]}
			names := e.re.SubexpNames()
			for k := 1; k < len(names); k++ {
				if names[k] != "" && loc[2*k] >= 0 {
					if m.Captures == nil {
						m.Captures = map[string]string{}
					}
					m.Captures[names[k]] = path[loc[2*k]:loc[2*k+1]]
				}
			}
			return m, true
		}
		if !strings.HasPrefix(path, e.prefix) {
			continue
		}
		return Match{Route: e.route, Path: path, Prefix: e.prefix}, true
	}
	return Match{}, false
}

// UpstreamPath joins a service path (empty means "/") and a request path
// the way Kong's path_handling v0 does. With strip, the part of reqPath
// after prefix (with a leading "./" or "../" dropped) is appended to the
// service path with exactly one slash between them, a trailing slash of
// the request kept; without strip, the whole request path is appended.
func UpstreamPath(servicePath, reqPath, prefix string, strip bool) string {
	base := servicePath
	if base == "" {
		base = "/"
	}
	if reqPath == "" {
		reqPath = "/"
	}
	endsSlash := strings.HasSuffix(base, "/")
	if !strip {
		switch {
		case endsSlash:
			return base + reqPath[1:]
		case reqPath == "/":
			return base
		}
		return base + reqPath
	}
	post := ""
	if len(prefix) < len(reqPath) && strings.HasPrefix(reqPath, prefix) {
		post = sanitizePostfix(reqPath[len(prefix):])
	}
	reqSlash := strings.HasSuffix(reqPath, "/")
	if endsSlash {
		switch {
		case post == "" && base == "/":
			return "/"
		case post == "" && reqSlash:
			return base
		case post == "":
			return base[:len(base)-1]
		case post[0] == '/':
			return base[:len(base)-1] + post
		}
		return base + post
	}
	switch {
	case post == "" && len(reqPath) > 1 && reqSlash:
		return base + "/"
	case post == "":
		return base
	case post[0] == '/':
		return base + post
	}
	return base + "/" + post
}

// sanitizePostfix drops a leading "./" or "../" (and a bare "." or "..")
// from what follows the matched prefix, so a request cannot climb out of
// the service path.
func sanitizePostfix(p string) string {
	switch {
	case p == "." || p == "..":
		return ""
	case strings.HasPrefix(p, "./"):
		return p[2:]
	case strings.HasPrefix(p, "../"):
		return p[3:]
	}
	return p
}

func matchHeaders(rules []headerRule, h HeaderGetter) bool {
	if h == nil {
		return false
	}
	for _, r := range rules {
		v := string(h.Peek(r.name))
		ok := false
		for _, want := range r.values {
			if strings.EqualFold(v, want) {
				ok = true
				break
			}
		}
		if !ok && len(r.regexps) > 0 {
			lv := strings.ToLower(v)
			for _, re := range r.regexps {
				if re.MatchString(lv) {
					ok = true
					break
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func splitHost(host string) (name, port string) {
	host = strings.ToLower(host)
	if strings.HasPrefix(host, "[") {
		if i := strings.Index(host, "]"); i > 0 {
			name = host[:i+1]
			if len(host) > i+2 && host[i+1] == ':' {
				port = host[i+2:]
			}
			return name, port
		}
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		return host[:i], host[i+1:]
	}
	return host, ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
