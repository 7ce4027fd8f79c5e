package gateway

import (
	"strings"
	"testing"
)

// TestDisabledAndIgnoredPlugins: a plugin sluice does not implement is an
// error naming it, unless it is disabled (enabled: false, accepted and
// ignored as Kong ignores it) or named in IgnorePlugins; an authentication
// or authorization plugin, or one sluice implements, cannot be ignored.
func TestDisabledAndIgnoredPlugins(t *testing.T) {
	const cfg = `
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:9
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: zipkin
        enabled: false
        config: {http_endpoint: "http://127.0.0.1:9411/api/v2/spans"}
      - name: datadog
        config: {host: 127.0.0.1}
`
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Validate([]byte(cfg))
	if err == nil || strings.Contains(err.Error(), "'zipkin'") || !strings.Contains(err.Error(), "services[0].plugins[1].name: plugin 'datadog' is not implemented by sluice") {
		t.Fatalf("without IgnorePlugins: %v", err)
	}
	g, err = New(Options{IgnorePlugins: []string{"datadog"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate([]byte(cfg)); err != nil {
		t.Fatalf("with IgnorePlugins: %v", err)
	}
	for _, name := range []string{"hmac-auth", "oauth2", "ldap-auth", "ip-restriction", "openid-connect"} {
		// Refused as protecting routes, or as implemented by sluice.
		if _, err := New(Options{IgnorePlugins: []string{name}}); err == nil || !strings.Contains(err.Error(), "open") && !strings.Contains(err.Error(), "sluice implements") {
			t.Errorf("IgnorePlugins %s: %v, want a refusal", name, err)
		}
	}
	if _, err := New(Options{IgnorePlugins: []string{"rate-limiting"}}); err == nil || !strings.Contains(err.Error(), "sluice implements") {
		t.Errorf("IgnorePlugins rate-limiting: %v", err)
	}
}
