package router

import (
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// routesOf decodes the routes of one service, given as YAML list items.
func routesOf(t *testing.T, routes string) []*kongconf.Route {
	t.Helper()
	cfg, err := parseConfig([]byte("_format_version: \"3.0\"\nservices:\n  - name: s\n    url: http://u.test\n    routes:\n" + routes))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Routes
}

// parseConfig decodes a declarative configuration that must be valid.
func parseConfig(data []byte) (*kongconf.Config, error) {
	cfg, errs := kongconf.Decode(data)
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

func TestMatchOrder(t *testing.T) {
	cfg, err := parseConfig([]byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://u.test/s
    routes:
      - {name: root, paths: [/]}
      - {name: api, paths: [/api]}
      - {name: api-v2, paths: [/api/v2]}
      - {name: re-low, paths: ["~/api/v\\d+/items"], regex_priority: 1}
      - {name: re-high, paths: ["~/api/v2/items/(?P<id>\\d+)"], regex_priority: 5}
      - {name: host, hosts: ["*.example.com"], paths: [/api]}
      - {name: get-only, methods: [GET], hosts: [get.test]}
      - {name: wild, hosts: ["*.plain.test"], paths: [/w]}
      - {name: plain, hosts: [a.plain.test], paths: [/]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg.Routes)
	cases := []struct {
		method, host, path string
		want, upstream     string
	}{
		{"GET", "x", "/other", "root", "/s/other"},
		{"GET", "x", "/api/v1", "api", "/s/v1"},
		{"GET", "x", "/api/v2/x", "api-v2", "/s/x"},
		{"GET", "x", "/api/v3/items", "re-low", "/s"},
		{"GET", "x", "/api/v2/items/7/more", "re-high", "/s/more"},
		{"GET", "a.example.com:8000", "/api/z", "host", "/s/z"},
		{"GET", "example.com", "/api/z", "api", "/s/z"},
		{"GET", "get.test", "/any", "get-only", "/s/any"},
		{"POST", "get.test", "/any", "root", "/s/any"},
		{"GET", "a.plain.test", "/w/x", "plain", "/s/w/x"},
		{"GET", "b.plain.test", "/w/x", "wild", "/s/x"},
	}
	for _, c := range cases {
		m, ok := r.Match(Request{Method: c.method, Host: c.host, Path: c.path})
		if !ok || m.Route.Name != c.want || m.UpstreamPath("/s") != c.upstream {
			t.Errorf("%s %s%s: got %v %q, want %s %q", c.method, c.host, c.path, m.Route, m.UpstreamPath("/s"), c.want, c.upstream)
		}
	}
	m, _ := r.Match(Request{Method: "GET", Host: "x", Path: "/api/v2/items/42"})
	if m.Captures["id"] != "42" {
		t.Errorf("captures %v", m.Captures)
	}
}

// TestUpstreamPath is Kong's path_handling v0 table: service path,
// route path, request path, strip_path -> upstream path.
type hdrs map[string]string

func (h hdrs) PeekAll(k string) [][]byte {
	if v, ok := h[strings.ToLower(k)]; ok {
		return [][]byte{[]byte(v)}
	}
	return nil
}

func TestMatchHeaders(t *testing.T) {
	cfg, err := parseConfig([]byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://u.test
    routes:
      - {name: any, paths: [/]}
      - {name: v2, paths: [/], headers: {X-Version: [v2, V3]}}
      - {name: v2-beta, paths: [/], headers: {x-version: [v2], x-beta: ["yes"]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg.Routes)
	for _, c := range []struct {
		h    hdrs
		want string
	}{
		{nil, "any"},
		{hdrs{"x-version": "v1"}, "any"},
		{hdrs{"x-version": "v3"}, "v2"},
		{hdrs{"x-version": "V2", "x-beta": "YES"}, "v2-beta"},
		{hdrs{"x-version": "v2", "x-beta": "no"}, "v2"},
	} {
		var g HeaderGetter
		if c.h != nil {
			g = c.h
		}
		m, ok := r.Match(Request{Method: "GET", Host: "x", Path: "/p", Headers: g})
		if !ok || m.Route.Name != c.want {
			t.Errorf("%v: got %v, want %s", c.h, m.Route, c.want)
		}
	}
}

func TestUpstreamPath(t *testing.T) {
	for _, c := range []struct {
		base, prefix, req string
		strip             bool
		want              string
	}{
		{"", "/", "/x", true, "/x"},
		{"/", "/r", "/r", true, "/"},
		{"/s", "/r", "/r", true, "/s"},
		{"/s", "/r", "/r/", true, "/s/"},
		{"/s", "/r", "/rreq", true, "/s/req"},
		{"/s", "/r", "/r/req", true, "/s/req"},
		{"/s", "/r/", "/r/req", true, "/s/req"},
		{"/s/", "/r", "/r", true, "/s"},
		{"/s/", "/r", "/r/", true, "/s/"},
		{"/s/", "/r", "/r/req", true, "/s/req"},
		{"/s/", "/r/", "/r/req", true, "/s/req"},
		{"/s", "/r", "/r/../x", true, "/s/../x"},
		{"/s", "/r", "/r../x", true, "/s/x"},
		{"/s", "/r", "/r/req", false, "/s/r/req"},
		{"/s/", "/r", "/r/req", false, "/s/r/req"},
		{"/s", "/", "/", false, "/s"},
		{"", "/r", "/r/req", false, "/r/req"},
	} {
		if got := UpstreamPath(c.base, c.req, c.prefix, c.strip); got != c.want {
			t.Errorf("UpstreamPath(%q, %q, %q, %v) = %q, want %q", c.base, c.req, c.prefix, c.strip, got, c.want)
		}
	}
}

// TestMatchRegexHeadersAndSNIs: "~*" header values are regexes found in
// the lower-cased value; a route's snis decide on TLS requests only, and
// count as an attribute.
func TestMatchRegexHeadersAndSNIs(t *testing.T) {
	cfg, err := parseConfig([]byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://u.test
    routes:
      - {name: any, paths: [/]}
      - {name: re, paths: [/], headers: {x-version: ["~*^v[23]$", v9]}}
      - {name: sni, paths: [/], snis: [a.example.com]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg.Routes)
	for _, c := range []struct {
		h    hdrs
		tls  bool
		sni  string
		want string
	}{
		{hdrs{"x-version": "V3"}, false, "", "re"},
		{hdrs{"x-version": "v9"}, false, "", "re"},
		{hdrs{"x-version": "v33"}, false, "", "sni"}, // plain HTTP ignores snis
		{hdrs{}, true, "a.example.com", "sni"},
		{hdrs{}, true, "A.Example.com", "sni"},
		{hdrs{}, true, "b.example.com", "any"},
		{hdrs{}, true, "", "any"},
	} {
		m, ok := r.Match(Request{Method: "GET", Host: "x", Path: "/p", TLS: c.tls, SNI: c.sni, Headers: c.h})
		if !ok || m.Route.Name != c.want {
			t.Errorf("%v tls=%v sni=%q: got %v, want %s", c.h, c.tls, c.sni, m.Route, c.want)
		}
	}
}

type multi map[string][]string

func (h multi) PeekAll(k string) [][]byte {
	var out [][]byte
	for _, v := range h[strings.ToLower(k)] {
		out = append(out, []byte(v))
	}
	return out
}

// TestMatchAsKongExpressions: what Kong's traditional_compatible router
// compiles routes to (kong/router/transform.lua): a host's port is the
// port the request arrived on, not the Host header's; a wildcard sni is a
// suffix or prefix; a header rule matches any of the header's values; a
// regex is anchored by a "^" before it.
func TestMatchAsKongExpressions(t *testing.T) {
	routes := routesOf(t, `
      - {name: any, paths: [/]}
      - {name: ported, hosts: ["port.test:8000", "[::1]:8443"], paths: [/]}
      - {name: header, paths: [/], headers: {x-version: [v1]}}
      - {name: alternation, paths: ["~/a$|/b"]}
`)
	sniRoutes := routesOf(t, `
      - {name: any, paths: [/]}
      - {name: wild-sni, protocols: [https], snis: ["*.example.com", "api.*", "plain.test."], paths: [/]}
`)
	r, rs := New(routes), New(sniRoutes)
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"host port is the listener's", Request{Host: "port.test", Port: 8000, Path: "/x"}, "ported"},
		{"Host header's port ignored", Request{Host: "port.test:9999", Port: 8000, Path: "/x"}, "ported"},
		{"other listener", Request{Host: "port.test:8000", Port: 8001, Path: "/x"}, "any"},
		{"IPv6 host with port", Request{Host: "[::1]", Port: 8443, Path: "/x"}, "ported"},
		{"sni suffix", Request{TLS: true, SNI: "x.example.com", Path: "/x"}, "wild-sni"},
		{"sni suffix needs the dot", Request{TLS: true, SNI: "example.com", Path: "/x"}, "any"},
		{"sni prefix", Request{TLS: true, SNI: "api.test", Path: "/x"}, "wild-sni"},
		{"sni trailing dot dropped", Request{TLS: true, SNI: "plain.test", Path: "/x"}, "wild-sni"},
		{"any header value", Request{Path: "/x", Headers: multi{"x-version": {"v0", "V1"}}}, "header"},
		{"no header value", Request{Path: "/x", Headers: multi{"x-version": {"v0", "v2"}}}, "any"},
		{"regex first branch anchored", Request{Path: "/zzz/a"}, "any"},
		{"regex later branch not anchored", Request{Path: "/zzz/b"}, "alternation"},
	} {
		c.req.Method = "GET"
		rt := r
		if c.req.TLS {
			rt = rs
		}
		if m, ok := rt.Match(c.req); !ok || m.Route.Name != c.want {
			t.Errorf("%s: got %v, want %s", c.name, m.Route, c.want)
		}
	}
}

// TestEqualPriorityByID: routes Kong gives the same priority are tried by
// id, greatest first: the file's id, or the one Kong derives from a route's
// name; a route whose paths Kong splits by length has one id per group.
func TestEqualPriorityByID(t *testing.T) {
	routes := routesOf(t, `
      - {name: low, id: 11111111-1111-4111-8111-111111111111, paths: ["~/users/\\d+$"]}
      - {name: high, id: FFFFFFFF-ffff-4fff-8fff-ffffffffffff, paths: ["~/users/.+"]}
      - {name: alpha, paths: ["~/items/.+"]}
      - {name: beta, paths: ["~/items/\\d+"]}
`)
	r := New(routes)
	if m, _ := r.Match(Request{Method: "GET", Path: "/users/5"}); m.Route.Name != "high" {
		t.Errorf("/users/5: %s, want high (the greater id)", m.Route.Name)
	}
	want := "alpha"
	if routes[2].ID < routes[3].ID {
		want = "beta"
	}
	if m, _ := r.Match(Request{Method: "GET", Path: "/items/5"}); m.Route.Name != want {
		t.Errorf("/items/5: %s, want %s (ids %s, %s)", m.Route.Name, want, routes[2].ID, routes[3].ID)
	}

	// split: /xy and /long are two groups; /xy's id is derived from the
	// route's, and decides against whole's id.
	routes = routesOf(t, `
      - {name: split, paths: [/xy, /long]}
      - {name: whole, paths: [/xy]}
`)
	r = New(routes)
	want = "split"
	if splitID(routes[0].ID, 1) < routes[1].ID {
		want = "whole"
	}
	if m, _ := r.Match(Request{Method: "GET", Path: "/xy"}); m.Route.Name != want {
		t.Errorf("/xy: %s, want %s", m.Route.Name, want)
	}
}
