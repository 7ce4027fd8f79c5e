package kongplugin

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/policy/dimensions"
)

var pluginNames = []string{"sluice-dimensions", "sluice-rate-limiting", "sluice-concurrency"}

// TestDeployKongFiles checks deploy/kong against the code, since Docker
// cannot run here: every sluice plugin config in kong.yml passes the
// plugin's own validation, the overrides example parses, and kong.conf
// and the Dockerfile name the three plugins with matching commands.
func TestDeployKongFiles(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kong")
	data, err := os.ReadFile(filepath.Join(dir, "kong.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("kong.yml: %v", err)
	}
	p := NewProcess(Options{})
	defer p.Close()
	validators := map[string]func() any{
		"sluice-dimensions":    p.NewDimensions,
		"sluice-rate-limiting": p.NewRateLimiting,
		"sluice-concurrency":   p.NewConcurrency,
	}
	seen := map[string]bool{}
	for _, pl := range pluginsIn(doc) {
		name, _ := pl["name"].(string)
		newFn, ok := validators[name]
		if !ok {
			continue
		}
		seen[name] = true
		raw, err := json.Marshal(pl["config"])
		if err != nil {
			t.Fatal(err)
		}
		cfg := newFn()
		if err := json.Unmarshal(raw, cfg); err != nil {
			t.Errorf("%s config does not decode as go-pdk decodes it: %v", name, err)
			continue
		}
		if err := cfg.(interface{ Validate() error }).Validate(); err != nil {
			t.Errorf("%s config in kong.yml: %v", name, err)
		}
	}
	for _, n := range pluginNames {
		if !seen[n] {
			t.Errorf("kong.yml does not use %s", n)
		}
	}

	ov, err := os.ReadFile(filepath.Join(dir, "overrides.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dimensions.ParseOverrides(ov); err != nil {
		t.Errorf("overrides.json: %v", err)
	}

	conf := readConf(t, filepath.Join(dir, "kong.conf"))
	if got := conf["pluginserver_names"]; got != strings.Join(pluginNames, ",") {
		t.Errorf("pluginserver_names = %q", got)
	}
	if got := conf["plugins"]; got != "bundled,"+strings.Join(pluginNames, ",") {
		t.Errorf("plugins = %q", got)
	}
	for _, n := range pluginNames {
		v := strings.ReplaceAll(n, "-", "_")
		for key, want := range map[string]string{
			"socket":    "/usr/local/kong/" + n + ".socket",
			"start_cmd": "/usr/local/bin/" + n + " -kong-prefix /usr/local/kong",
			"query_cmd": "/usr/local/bin/" + n + " -dump",
		} {
			if got := conf["pluginserver_"+v+"_"+key]; got != want {
				t.Errorf("pluginserver_%s_%s = %q, want %q", v, key, got, want)
			}
		}
		if _, err := os.Stat(filepath.Join("..", "..", "cmd", n, "main.go")); err != nil {
			t.Errorf("no binary for %s: %v", n, err)
		}
	}
	docker, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "ARG PLUGINS="+strings.Join(pluginNames, ",")) {
		t.Errorf("Dockerfile's default PLUGINS is not the three plugins")
	}
}

// pluginsIn returns every plugin entry of a decK document: global, and
// nested under services, routes and consumers.
func pluginsIn(v any) []map[string]any {
	var out []map[string]any
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if k == "plugins" {
				if list, ok := e.([]any); ok {
					for _, p := range list {
						if m, ok := p.(map[string]any); ok {
							out = append(out, m)
						}
					}
				}
				continue
			}
			out = append(out, pluginsIn(e)...)
		}
	case []any:
		for _, e := range t {
			out = append(out, pluginsIn(e)...)
		}
	}
	return out
}

// readConf reads "key = value" lines, ignoring comments.
func readConf(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("kong.conf line %q", line)
			continue
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m
}
