package router

import (
	"testing"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

func TestMatchOrder(t *testing.T) {
	cfg, err := kongconf.Parse([]byte(`
_format_version: "3.0"
services:
  - name: s
    url: http://u.test
    routes:
      - {name: root, paths: [/]}
      - {name: api, paths: [/api]}
      - {name: api-v2, paths: [/api/v2]}
      - {name: re-low, paths: ["~/api/v\\d+/items"], regex_priority: 1}
      - {name: re-high, paths: ["~/api/v2/items/(?P<id>\\d+)"], regex_priority: 5}
      - {name: host, hosts: ["*.example.com"], paths: [/api]}
      - {name: get-only, methods: [GET], hosts: [get.test]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg.Routes)
	cases := []struct {
		method, host, path string
		want, upstream     string
	}{
		{"GET", "x", "/other", "root", "/other"},
		{"GET", "x", "/api/v1", "api", "/v1"},
		{"GET", "x", "/api/v2/x", "api-v2", "/x"},
		{"GET", "x", "/api/v3/items", "re-low", "/"},
		{"GET", "x", "/api/v2/items/7/more", "re-high", "/more"},
		{"GET", "a.example.com:8000", "/api/z", "host", "/z"},
		{"GET", "example.com", "/api/z", "api", "/z"},
		{"GET", "get.test", "/any", "get-only", "/any"},
		{"POST", "get.test", "/any", "root", "/any"},
	}
	for _, c := range cases {
		m, ok := r.Match(c.method, c.host, c.path)
		if !ok || m.Route.Name != c.want || m.Path != c.upstream {
			t.Errorf("%s %s%s: got %v %q, want %s %q", c.method, c.host, c.path, m.Route, m.Path, c.want, c.upstream)
		}
	}
	m, _ := r.Match("GET", "x", "/api/v2/items/42")
	if m.Captures["id"] != "42" {
		t.Errorf("captures %v", m.Captures)
	}
}

func TestUpstreamPath(t *testing.T) {
	for _, c := range [][3]string{
		{"", "/x", "/x"}, {"/", "/x", "/x"}, {"/s", "/", "/s"}, {"/s", "/x", "/s/x"},
		{"/s/", "/x", "/s/x"}, {"", "", "/"},
	} {
		if got := UpstreamPath(c[0], c[1]); got != c[2] {
			t.Errorf("UpstreamPath(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
