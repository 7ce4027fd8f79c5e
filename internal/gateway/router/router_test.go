package router

import (
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

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
		m, ok := r.Match(c.method, c.host, c.path, nil)
		if !ok || m.Route.Name != c.want || m.UpstreamPath("/s") != c.upstream {
			t.Errorf("%s %s%s: got %v %q, want %s %q", c.method, c.host, c.path, m.Route, m.UpstreamPath("/s"), c.want, c.upstream)
		}
	}
	m, _ := r.Match("GET", "x", "/api/v2/items/42", nil)
	if m.Captures["id"] != "42" {
		t.Errorf("captures %v", m.Captures)
	}
}

// TestUpstreamPath is Kong's path_handling v0 table: service path,
// route path, request path, strip_path -> upstream path.
type hdrs map[string]string

func (h hdrs) Peek(k string) []byte { return []byte(h[strings.ToLower(k)]) }

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
		m, ok := r.Match("GET", "x", "/p", g)
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
		var m Match
		var ok bool
		if c.tls {
			m, ok = r.MatchTLS("GET", "x", "/p", c.sni, c.h)
		} else {
			m, ok = r.Match("GET", "x", "/p", c.h)
		}
		if !ok || m.Route.Name != c.want {
			t.Errorf("%v tls=%v sni=%q: got %v, want %s", c.h, c.tls, c.sni, m.Route, c.want)
		}
	}
}
