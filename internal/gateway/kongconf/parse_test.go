package kongconf

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// parse is Decode with the errors as one error, nil when there are none.
func parse(data []byte) (*Config, error) {
	cfg, errs := Decode(data)
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// TestInvalid checks every fixture in testdata/invalid against the exact
// list of errors in its .golden file.
func TestInvalid(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".golden") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parse(data)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
			}
			var got strings.Builder
			for _, fe := range err.(Errors) {
				got.WriteString(fe.Error() + "\n")
			}
			golden := strings.TrimSuffix(f, filepath.Ext(f)) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", got.String(), want)
			}
		})
	}
	if n < 4 {
		t.Fatalf("only %d fixtures found", n)
	}
}

const full = `
_format_version: "3.0"
services:
  - name: orders
    url: https://orders.internal:8443/v1
    routes:
      - name: orders-route
        paths: [/orders, "~/o/\\d+$"]
        methods: [GET, POST]
        hosts: [api.example.com]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [10, 100], window_size: [60, 3600], namespace: orders}
  - name: users
    protocol: http
    host: users.internal
    path: /u
routes:
  - name: users-route
    service: {name: users}
    paths: [/users]
    strip_path: false
    preserve_host: true
consumers:
  - username: alice
    custom_id: cust-001
    keyauth_credentials: [{key: alice-secret}]
    groups: [{name: gold}]
consumer_groups:
  - name: gold
    consumers: [{username: bob}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [100], window_size: [60], namespace: gold}
  - name: silver
plugins:
  - name: key-auth
    config: {key_names: [apikey]}
  - name: rate-limiting-advanced
    consumer_group: silver
    service: orders
    config: {limit: [5], window_size: [30]}
`

func TestParseFull(t *testing.T) {
	cfg, err := parse([]byte(strings.Replace(full, "consumers:\n  - username: alice", "consumers:\n  - username: bob\n  - username: alice", 1)))
	if err != nil {
		t.Fatal(err)
	}
	orders, users := cfg.Services[0], cfg.Services[1]
	if orders.Protocol != "https" || orders.Host != "orders.internal" || orders.Port != 8443 || orders.Path != "/v1" {
		t.Errorf("orders: %+v", orders)
	}
	if users.Port != 80 || users.Path != "/u" {
		t.Errorf("users: %+v", users)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[1].Service != users || cfg.Routes[1].StripPath || !cfg.Routes[1].PreserveHost || !cfg.Routes[0].StripPath {
		t.Errorf("routes: %+v %+v", cfg.Routes[0], cfg.Routes[1])
	}
	bob, alice := cfg.Consumers[0], cfg.Consumers[1]
	if len(alice.Groups) != 1 || len(bob.Groups) != 1 || alice.Groups[0].Name != "gold" || len(cfg.ConsumerGroups[0].Consumers) != 2 {
		t.Errorf("memberships: alice %v, bob %v", alice.Groups, bob.Groups)
	}
	if len(cfg.Plugins) != 4 {
		t.Fatalf("%d plugins", len(cfg.Plugins))
	}
	if p := cfg.Plugins[0]; p.Route != cfg.Routes[0] || p.Where != "services[0].routes[0].plugins[0]" {
		t.Errorf("route plugin scope: %v at %s", p, p.Where)
	}
	if p := cfg.Plugins[1]; p.ConsumerGroup != cfg.ConsumerGroups[0] {
		t.Errorf("group plugin scope: %v", p)
	}
	if p := cfg.Plugins[3]; p.ConsumerGroup != cfg.ConsumerGroups[1] || p.Service != orders || string(p.Config) != `{"limit":[5],"window_size":[30]}` {
		t.Errorf("top-level plugin: %v %s", p, p.Config)
	}
	// Ids are stable across loads, so counters keyed by them survive.
	again, err := parse([]byte(strings.Replace(full, "consumers:\n  - username: alice", "consumers:\n  - username: bob\n  - username: alice", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if again.Consumers[1].ID != alice.ID || again.Services[0].ID != orders.ID || again.Plugins[3].ID != cfg.Plugins[3].ID {
		t.Error("generated ids differ between two loads of the same file")
	}
}

func TestParseJSON(t *testing.T) {
	cfg, err := parse([]byte(`{"_format_version":"3.0","services":[{"name":"s","url":"http://x.test","routes":[{"paths":["/"]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes[0].Service != cfg.Services[0] {
		t.Error("nested route not linked")
	}
}

func TestParseUnreadable(t *testing.T) {
	for _, in := range []string{"", "a: [", "- 1\n- 2", "_format_version: \"3.0\"\n_format_version: \"3.0\""} {
		if _, err := parse([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: got %v", in, err)
		}
	}
}

// FuzzParse checks that no input makes the loader panic and that every
// rejection wraps ErrInvalid and names at least one problem.
func FuzzParse(f *testing.F) {
	f.Add([]byte(full))
	f.Add([]byte(`{"_format_version":"3.0","routes":[{"paths":["~(["]}]}`))
	f.Add([]byte("_format_version: \"3.0\"\nplugins: [{name: x, consumer: {id: 1}}]"))
	files, _ := filepath.Glob("testdata/invalid/*")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || len(err.(Errors)) == 0 {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		for _, r := range cfg.Routes {
			if r.ID == "" {
				t.Fatal("route without id")
			}
		}
	})
}

// TestServiceURLWins: with url set, Kong expands it into protocol, host,
// port and path, replacing whatever those fields say (a url without a
// path clears path), before validating them: the file loads, as in Kong.
func TestServiceURLWins(t *testing.T) {
	cfg, err := parse([]byte(`
_format_version: "3.0"
services:
  - name: a
    url: https://a.example:8443/v1
    protocol: http
    host: other.example
    port: 99999
    path: /ignored
  - name: b
    url: http://b.example
    path: /cleared
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Services[0], cfg.Services[1]
	if a.Protocol != "https" || a.Host != "a.example" || a.Port != 8443 || a.Path != "/v1" {
		t.Errorf("a: %s://%s:%d%s, want the url's parts", a.Protocol, a.Host, a.Port, a.Path)
	}
	if b.Host != "b.example" || b.Port != 80 || b.Path != "" {
		t.Errorf("b: %s:%d path %q, want the url's host, port 80, no path", b.Host, b.Port, b.Path)
	}
}

// TestServiceBadURLOneError: a url that does not parse, or has no scheme,
// is one error at the url, not followed by one about the protocol it
// could not give.
func TestServiceBadURLOneError(t *testing.T) {
	for _, u := range []string{"not a url", "//host.example/x", "host.example"} {
		_, err := parse([]byte("_format_version: \"3.0\"\nservices:\n  - name: s\n    url: \"" + u + "\"\n"))
		if err == nil || strings.Count(err.Error(), "services[0].") != 1 || !strings.Contains(err.Error(), "services[0].url: invalid url") {
			t.Errorf("url %q: %v; want one error, at services[0].url", u, err)
		}
	}
}
