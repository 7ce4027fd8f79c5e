package kongconf

import (
	"reflect"
	"strings"
	"testing"
)

func decodeEnv(t *testing.T, doc string, env map[string]string) (*Config, Errors) {
	t.Helper()
	return DecodeWith([]byte(doc), DecodeOptions{LookupEnv: func(n string) (string, bool) {
		v, ok := env[n]
		return v, ok
	}})
}

// TestFormatVersions: a 1.1 or 2.1 file's route paths are read as Kong
// migrates them (a path with regex characters was a regex), a 3.0 file's
// as written.
func TestFormatVersions(t *testing.T) {
	const doc = `
_format_version: "VERSION"
services:
  - name: s
    url: http://127.0.0.1:9
    routes:
      - name: nested
        paths: ['/v1/items/\d+', /static, /a%2Db%2F]
routes:
  - name: top
    service: s
    paths: ['/users/(?<id>\w+)$', /plain.path_~-]
`
	cases := []struct {
		version string
		nested  []string
		top     []string
	}{
		{"1.1", []string{`~/v1/items/\d+`, "/static", "/a-b%2F"}, []string{`~/users/(?<id>\w+)$`, "/plain.path_~-"}},
		{"2.1", []string{`~/v1/items/\d+`, "/static", "/a-b%2F"}, []string{`~/users/(?<id>\w+)$`, "/plain.path_~-"}},
	}
	for _, c := range cases {
		cfg, errs := Decode([]byte(strings.Replace(doc, "VERSION", c.version, 1)))
		if len(errs) != 0 {
			t.Fatalf("%s: %v", c.version, errs)
		}
		if got := cfg.Routes[0].Paths; !reflect.DeepEqual(got, c.nested) {
			t.Errorf("%s nested: %q, want %q", c.version, got, c.nested)
		}
		if got := cfg.Routes[1].Paths; !reflect.DeepEqual(got, c.top) {
			t.Errorf("%s top: %q, want %q", c.version, got, c.top)
		}
	}
	// 3.0 reads paths as written: the regex-looking ones are prefixes,
	// and a prefix must be in normal form, as in Kong.
	_, errs := Decode([]byte(strings.Replace(doc, "VERSION", "3.0", 1)))
	want := "services[0].routes[0].paths[2]: non-normalized path, consider use '/a-b%2F' instead"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("3.0: %v, want %s", errs, want)
	}
	cfg, errs := Decode([]byte(strings.Replace(strings.Replace(doc, "/a%2Db%2F", "/a-b%2F", 1), "VERSION", "3.0", 1)))
	if len(errs) != 0 {
		t.Fatalf("3.0: %v", errs)
	}
	if got, want := cfg.Routes[0].Paths, []string{`/v1/items/\d+`, "/static", "/a-b%2F"}; !reflect.DeepEqual(got, want) {
		t.Errorf("3.0 nested: %q, want %q", got, want)
	}
}

// TestRouterPaths: route paths are checked as Kong's router_path type
// checks them, with Kong's messages; a 1.1 file's prefixes are normalised
// as Kong migrates them.
func TestRouterPaths(t *testing.T) {
	for _, c := range []struct{ path, err string }{
		{"/ok/a-b%2F", ""},
		{"~/a(b|c)$", ""},
		{"/x//y", `must not have empty segments, got "/x//y"`},
		{"~/a//b", `must not have empty segments, got "~/a//b"`},
		{"/e/./f", "non-normalized path, consider use '/e/f' instead"},
		{"/a%2Db", "non-normalized path, consider use '/a-b' instead"},
		{"/a%2fb", "non-normalized path, consider use '/a%2Fb' instead"},
		{"/%zz", "invalid url-encoded value: '%zz'"},
		{"~abc", `should start with: / (fixed path) or ~/ (regex path), got "~abc"`},
		{"abc", `should start with: / (fixed path) or ~/ (regex path), got "abc"`},
		{"~/(", `invalid regex "~/(": missing closing )`},
	} {
		doc := "_format_version: \"3.0\"\nroutes: [{name: r, paths: ['" + c.path + "']}]\n"
		_, errs := Decode([]byte(doc))
		got := ""
		if len(errs) > 0 {
			got = strings.TrimPrefix(errs[0].Error(), "routes[0].paths[0]: ")
		}
		if got != c.err {
			t.Errorf("%s: %q, want %q", c.path, got, c.err)
		}
	}
	// A path from a reference is quoted as the reference, and nothing
	// derived from its value is shown.
	for _, c := range []struct{ value, want string }{
		{"~/VAULTSECRET(", `routes[0].paths[0]: invalid regex "{vault://env/rpath}": missing closing )`},
		{"/VAULT/./SECRET", "routes[0].paths[0]: non-normalized path"},
	} {
		_, errs := decodeEnv(t, "_format_version: \"3.0\"\nroutes: [{name: r, paths: ['{vault://env/rpath}']}]\n", map[string]string{"RPATH": c.value})
		if len(errs) != 1 || errs[0].Error() != c.want || strings.Contains(errs[0].Error(), "SECRET") {
			t.Errorf("%s: %v, want %s", c.value, errs, c.want)
		}
	}
	if _, errs := Decode([]byte("_format_version: \"3.0\"\nroutes: [{name: r, headers: {'x a': [v]}}]\n")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "bad header name 'x a'") {
		t.Errorf("header name 'x a': %v", errs)
	}
	for _, h := range []string{"a.com:80:80", "a:b.com"} {
		if _, errs := Decode([]byte("_format_version: \"3.0\"\nroutes: [{name: r, hosts: ['" + h + "']}]\n")); len(errs) != 1 {
			t.Errorf("host %s: %v, want one error", h, errs)
		}
	}
	if _, errs := Decode([]byte("_format_version: \"3.0\"\nroutes: [{name: r, hosts: ['[::1]:8000'], methods: [G-ET]}]\n")); len(errs) != 1 || !strings.Contains(errs[0].Error(), "methods[0]") {
		t.Errorf("methods [G-ET] with an IPv6 host: %v, want the method's error only", errs)
	}
	cfg, errs := Decode([]byte("_format_version: \"1.1\"\nroutes: [{name: r, paths: [/a//b, /c/%20d, /e/./f, /g/%2fh]}]\n"))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if got, want := cfg.Routes[0].Paths, []string{"/a/b", "/c/ d", "/e/f", "/g/%2Fh"}; !reflect.DeepEqual(got, want) {
		t.Errorf("1.1 paths %q, want %q", got, want)
	}
}

// TestReferences: decK substitutions anywhere in a string, typed again
// when a plain scalar is one substitution; env-vault references with a
// prefix, a JSON field and a version.
func TestReferences(t *testing.T) {
	const doc = `
_format_version: "3.0"
services:
  - name: s
    url: 'http://${{ env "DECK_HOST" }}:${{env "DECK_PORT"}}/api'
  - name: t
    host: ${{ env "DECK_HOST" }}
    port: ${{ env "DECK_PORT" | toInt }}
    tls_verify: ${{ env "DECK_VERIFY" | toBool }}
    retries: ${{ env "DECK_PORT" }}
consumers:
  - username: alice
    custom_id: "${{ env "DECK_PORT" }}"
    keyauth_credentials:
      - key: "{vault://env/api-keys/alice?prefix=team_}"
      - key: "{vault://env/rotating-key#2}"
    basicauth_credentials:
      - username: alice
        password: "{vault://env/alice-pw}"
    jwt_secrets:
      - key: iss-1
        secret: '{vault://env/jwt-secrets/}'
`
	env := map[string]string{
		"DECK_HOST": "up.internal", "DECK_PORT": "8080", "DECK_VERIFY": "false",
		"TEAM_API_KEYS": `{"alice": "k-alice"}`, "ROTATING_KEY_PREVIOUS": "k-old",
		"ALICE_PW": "s3cret", "JWT_SECRETS/": "whole",
	}
	cfg, errs := decodeEnv(t, doc, env)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	s, u := cfg.Services[0], cfg.Services[1]
	if s.Host != "up.internal" || s.Port != 8080 || s.Path != "/api" {
		t.Errorf("url service: %+v", s)
	}
	if u.Host != "up.internal" || u.Port != 8080 || u.TLSVerify || u.Retries != 8080 {
		t.Errorf("typed service: %+v", u)
	}
	c := cfg.Consumers[0]
	if c.CustomID != "8080" {
		t.Errorf("custom_id %q: a quoted substitution stays a string", c.CustomID)
	}
	if c.KeyAuthKeys[0].Key != "k-alice" || c.KeyAuthKeys[1].Key != "k-old" {
		t.Errorf("keys %+v", c.KeyAuthKeys)
	}
	if c.BasicAuth[0].PasswordHash != BasicAuthHash(c.ID, "s3cret") {
		t.Errorf("password hash %q", c.BasicAuth[0].PasswordHash)
	}
	if c.JWTSecrets[0].Secret != "whole" {
		t.Errorf("jwt secret %q", c.JWTSecrets[0].Secret)
	}
	// A quoted substitution of a number field is a string, as decK
	// renders it.
	_, errs = decodeEnv(t, "_format_version: \"3.0\"\nservices: [{name: s, host: h, port: '${{ env \"DECK_PORT\" }}'}]\n", env)
	if len(errs) != 1 || errs[0].Error() != "services[0].port: expected an integer, got a string" {
		t.Errorf("quoted port: %v", errs)
	}
}

// TestInfo: _info.defaults fill the fields entities leave out, nested
// routes included; _transform: false takes basic-auth passwords as
// Kong's stored hashes; decK's _konnect target is accepted.
func TestInfo(t *testing.T) {
	const doc = `
_format_version: "3.0"
_workspace: team-a
_konnect: {control_plane_name: default}
_transform: false
_info:
  select_tags: [team-a]
  consumer_group_policy_overrides: true
  defaults:
    service: {read_timeout: 5000, retries: 1}
    route: {strip_path: false}
services:
  - name: s
    url: http://127.0.0.1:9
    retries: 7
    routes: [{name: nested, paths: [/a]}]
routes:
  - {name: top, service: s, paths: [/b], strip_path: true}
consumers:
  - username: alice
    id: 6e0ea0a4-5ba5-4f3b-a5c1-8d08f1b70001
    basicauth_credentials: [{username: alice, password: 2F0CF33B9C1E1D2F1D1F1E1D1C1B1A1918171615}]
`
	cfg, errs := Decode([]byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if cfg.Info.Workspace != "team-a" || cfg.Info.Transform || !cfg.Info.ConsumerGroupPolicyOverrides || !reflect.DeepEqual(cfg.Info.SelectTags, []string{"team-a"}) {
		t.Errorf("info %+v", cfg.Info)
	}
	s := cfg.Services[0]
	if s.ReadTimeout.Milliseconds() != 5000 || s.Retries != 7 {
		t.Errorf("service defaults: read %v retries %d", s.ReadTimeout, s.Retries)
	}
	if cfg.Routes[0].StripPath || !cfg.Routes[1].StripPath {
		t.Errorf("route defaults: nested %v top %v", cfg.Routes[0].StripPath, cfg.Routes[1].StripPath)
	}
	if h := cfg.Consumers[0].BasicAuth[0].PasswordHash; h != "2f0cf33b9c1e1d2f1d1f1e1d1c1b1a1918171615" {
		t.Errorf("stored hash %q", h)
	}
}

// TestNullsUnset: null is "unset" wherever it appears, as in Kong's
// exports.
func TestNullsUnset(t *testing.T) {
	const doc = `
_format_version: "3.0"
_info: null
services:
  - name: s
    url: http://127.0.0.1:9
    tags: null
    client_certificate: null
    routes:
      - {name: r, paths: [/], hosts: null, snis: null, sources: null, destinations: null, headers: null, methods: null}
plugins:
  - name: key-auth
    config: {anonymous: null, key_names: [apikey], realm: null}
    consumer: null
    route: null
`
	cfg, errs := Decode([]byte(doc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if string(cfg.Plugins[0].Config) != `{"key_names":["apikey"]}` {
		t.Errorf("config %s: nulls dropped, defaults apply", cfg.Plugins[0].Config)
	}
	if cfg.Plugins[0].Consumer != nil || cfg.Plugins[0].Route != nil {
		t.Errorf("plugin scope %+v", cfg.Plugins[0])
	}
}

// TestVaultEntities: a vaults entry of the env vault gives references a
// prefix of their own, with its config.prefix; other vault strategies are
// refused by name.
func TestVaultEntities(t *testing.T) {
	const doc = `
_format_version: "3.0"
vaults:
  - {name: env, prefix: team-secrets, description: team env, config: {prefix: TEAM_}}
consumers:
  - username: alice
    keyauth_credentials:
      - key: "{vault://team-secrets/alice-key}"
      - key: "{vault://team-secrets/alice-key?prefix=OTHER_}"
`
	cfg, errs := decodeEnv(t, doc, map[string]string{"TEAM_ALICE_KEY": "k1", "OTHER_ALICE_KEY": "k2"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if k := cfg.Consumers[0].KeyAuthKeys; k[0].Key != "k1" || k[1].Key != "k2" {
		t.Errorf("keys %+v", k)
	}
	_, errs = decodeEnv(t, `
_format_version: "3.0"
vaults:
  - {name: aws, prefix: aws-prod, config: {region: us-east-1}}
  - {name: env, prefix: Bad_Prefix}
consumers:
  - username: alice
    keyauth_credentials: [{key: "{vault://aws-prod/alice}"}]
`, nil)
	want := []string{
		"vaults[0].name: vault 'aws' is not implemented by sluice (it implements env)",
		"vaults[1].prefix: invalid value: Bad_Prefix",
		"consumers[0].keyauth_credentials[0].key: vault reference to the 'aws-prod' vault ('aws' in vaults): sluice resolves only the env vault",
	}
	var got []string
	for _, fe := range errs {
		got = append(got, fe.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
