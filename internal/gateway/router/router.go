// Package router matches requests to Kong routes by host, method and path.
//
// Order, as Kong's traditional_compatible router: a route matching on more
// kinds of attribute (hosts, methods, headers, paths, snis) wins over one matching
// on fewer; then routes whose hosts have no wildcard; then routes matching
// more headers; then regex paths (by
// regex_priority, higher first) before prefix paths (longest first); then
// the route with the greater id, as Kong orders routes of equal priority
// (a route whose paths Kong splits into groups of one length, or of
// regexes, has one derived id per group: see splitID). A Router is
// immutable and safe for concurrent use.
package router

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/kongid"
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
	attrs    int    // number of attribute kinds the route matches on
	plain    bool   // hosts without wildcards
	id       string // Kong's id of the (split) route, for ties
	hosts    []hostPattern
	headers  []headerRule
	methods  []string
	snis     []hostPattern
	priority int
}

type headerRule struct {
	name   string
	values []string
	// regexps are the "~*" values compiled (lower-cased, as Kong does),
	// matched against the lower-cased header value.
	regexps []*regexp.Regexp
}

// A HeaderGetter returns every value of a request header (any case).
// *fasthttp.RequestHeader is one.
type HeaderGetter interface {
	PeekAll(key string) [][]byte
}

type hostPattern struct {
	exact, suffix, prefix string // one is set; suffix for "*.x", prefix for "x.*"
	port                  int    // 0 matches any port
}

// A Request is what a request is matched on.
type Request struct {
	Method string
	// Host is the Host header (any case, with or without a port, which is
	// not matched: a route host with a port matches Port).
	Host string
	// Path is the request path without the query string, normalised
	// (kongpath.Normalize).
	Path string
	// Port is the port the request arrived on.
	Port int
	// TLS is set for a request that came over TLS asking for server name
	// SNI ("" when the client sent none): a route with snis then matches
	// only when SNI is one of them.
	TLS bool
	SNI string
	// Headers are the request headers; nil matches no header rule.
	Headers HeaderGetter
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
	for _, rt := range routes {
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
		base := entry{route: rt, attrs: attrs, id: strings.ToLower(rt.ID), methods: rt.Methods, priority: rt.RegexPriority, plain: len(rt.Hosts) > 0}
		if len(rt.SNIs) > 0 {
			base.attrs++
			for _, sni := range rt.SNIs {
				base.snis = append(base.snis, compileSNI(sni))
			}
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
		groups := pathGroups(rt.Paths)
		for _, p := range rt.Paths {
			e := base
			e.hasPath = true
			if len(groups) > 1 {
				e.id = splitID(rt.ID, groups[pathGroupKey(p)])
			}
			if strings.HasPrefix(p, "~") {
				// Anchored as Kong anchors it: "^" before the regex, so
				// an alternation's later branches are not anchored.
				re, err := regexp.Compile("^" + p[1:])
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
		return a.id > b.id
	})
	return r
}

// pathGroupKey is the group Kong puts a route path in when it splits a
// route: 0 for a regex, else the prefix's length.
func pathGroupKey(p string) int {
	if strings.HasPrefix(p, "~") {
		return 0
	}
	return len(p)
}

// pathGroups numbers the groups of paths from 1, in the order of their
// first path.
func pathGroups(paths []string) map[int]int {
	g := map[int]int{}
	for _, p := range paths {
		if k := pathGroupKey(p); g[k] == 0 {
			g[k] = len(g) + 1
		}
	}
	return g
}

// splitNamespace is the namespace Kong derives the ids of split routes in
// (kong/router/transform.lua).
var splitNamespace = kongid.MustParse("7f145bf9-0dce-4f91-98eb-debbce4b9f6b")

// splitID is the id Kong gives group n of a route it splits by path: the
// version 5 UUID of the route's id, "#" and n.
func splitID(id string, n int) string {
	return kongid.V5(splitNamespace, id+"#"+strconv.Itoa(n)).String()
}

// compileSNI reads a route's sni as Kong does: "*.x" matches every name
// ending in ".x", "x.*" every name starting with "x.", and a trailing dot
// of any other name is dropped.
func compileSNI(sni string) hostPattern {
	switch {
	case strings.HasPrefix(sni, "*"):
		return hostPattern{suffix: strings.TrimSuffix(sni[1:], ".")}
	case strings.HasSuffix(sni, "*"):
		return hostPattern{prefix: sni[:len(sni)-1]}
	case len(sni) > 1:
		sni = strings.TrimSuffix(sni, ".")
	}
	return hostPattern{exact: sni}
}

func compileHost(h string) hostPattern {
	var hp hostPattern
	name, port := h, ""
	if strings.HasPrefix(h, "[") {
		if i := strings.Index(h, "]:"); i > 0 {
			name, port = h[:i+1], h[i+2:]
		}
	} else if i := strings.LastIndexByte(h, ':'); i > 0 && strings.Count(h, ":") == 1 {
		name, port = h[:i], h[i+1:]
	}
	hp.port, _ = strconv.Atoi(port) // validated by kongconf
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

func (hp *hostPattern) match(host string, port int) bool {
	if hp.port != 0 && hp.port != port {
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

// Match finds the route for req. It reports false when no route matches.
func (r *Router) Match(req Request) (Match, bool) {
	hostName, _ := splitHost(req.Host)
	sni := strings.ToLower(req.SNI)
	path := req.Path
	for i := range r.entries {
		e := &r.entries[i]
		if len(e.methods) > 0 && !contains(e.methods, req.Method) {
			continue
		}
		if req.TLS && len(e.snis) > 0 && !matchAny(e.snis, sni, 0) {
			continue
		}
		if len(e.hosts) > 0 && !matchAny(e.hosts, hostName, req.Port) {
			continue
		}
		if len(e.headers) > 0 && !matchHeaders(e.headers, req.Headers) {
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

func matchAny(ps []hostPattern, name string, port int) bool {
	for i := range ps {
		if ps[i].match(name, port) {
			return true
		}
	}
	return false
}

// matchHeaders reports whether every rule matches one of the values of
// its header, as Kong's any(lower(http.headers.x)).
func matchHeaders(rules []headerRule, h HeaderGetter) bool {
	if h == nil {
		return false
	}
	for _, r := range rules {
		ok := false
		for _, b := range h.PeekAll(r.name) {
			if r.matches(string(b)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (r *headerRule) matches(v string) bool {
	for _, want := range r.values {
		if strings.EqualFold(v, want) {
			return true
		}
	}
	if len(r.regexps) > 0 {
		lv := strings.ToLower(v)
		for _, re := range r.regexps {
			if re.MatchString(lv) {
				return true
			}
		}
	}
	return false
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
