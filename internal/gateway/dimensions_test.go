package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const dimsConfig = `
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes: [{name: r, paths: [/]}]
plugins:
  - name: sluice-dimensions
    config:
      key_prefix: biz
      dimensions:
        - {name: tenant, type: header, header: X-Tenant}
        - {name: seg, type: path_segment, index: 0}
      overrides:
        - {dimension: tenant, value: acme, limit: [3], window_size: [60], window_type: fixed}
      OVERRIDES_SOURCE
  - name: rate-limiting-advanced
    config: {limit: [1], window_size: [60], window_type: fixed, identifier: dimension, namespace: dims}
`

func countAllowed(t *testing.T, base, path string, hdr map[string]string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		r := do(t, "GET", base+path, hdr)
		switch r.status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	return ok
}

// TestDimensionsKeysAndOverrides: each (tenant, first path segment) pair
// has its own counter; tenant acme gets its override's 3 instead of 1; a
// request without the tenant falls back to the plugin's identifier (IP).
func TestDimensionsKeysAndOverrides(t *testing.T) {
	up := echoUpstream(t)
	cfg := strings.Replace(withUpstream(dimsConfig, up), "OVERRIDES_SOURCE", "", 1)
	_, base := startGateway(t, cfg, Options{})
	if n := countAllowed(t, base, "/a", map[string]string{"X-Tenant": "globex"}, 3); n != 1 {
		t.Errorf("globex /a: %d allowed, want 1", n)
	}
	if n := countAllowed(t, base, "/b", map[string]string{"X-Tenant": "globex"}, 3); n != 1 {
		t.Errorf("globex /b (another key): %d allowed, want 1", n)
	}
	if n := countAllowed(t, base, "/a", map[string]string{"X-Tenant": "acme"}, 5); n != 3 {
		t.Errorf("acme /a: %d allowed, want the override's 3", n)
	}
	if n := countAllowed(t, base, "/a", nil, 3); n != 1 {
		t.Errorf("no tenant: %d allowed, want 1 (counted by IP)", n)
	}
}

// TestDimensionsLiveOverridesFile changes the overrides file and waits,
// bounded, for the new quota to apply without a config reload.
func TestDimensionsLiveOverridesFile(t *testing.T) {
	up := echoUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "quotas.json")
	write := func(doc string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"overrides":[{"dimension":"tenant","value":"initech","limit":[2],"window_size":[60]}]}`)
	cfg := strings.Replace(withUpstream(dimsConfig, up), "OVERRIDES_SOURCE", "overrides_file: "+path, 1)
	g, base := startGateway(t, cfg, Options{})
	if n := countAllowed(t, base, "/p0", map[string]string{"X-Tenant": "initech"}, 4); n != 2 {
		t.Fatalf("initech from the file: %d allowed, want 2", n)
	}
	write(`{"overrides":[{"dimension":"tenant","value":"initech","limit":[10],"window_size":[60]}]}`)
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; ; i++ {
		r := do(t, "GET", base+"/p"+string(rune('0'+i%10))+strings.Repeat("x", i), map[string]string{"X-Tenant": "initech"})
		if r.status == 200 && r.header.Get("X-RateLimit-Limit-Minute") == "10" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new quota not applied: %d %v", r.status, r.header)
		}
		<-time.After(10 * time.Millisecond) // poll interval, bounded by the deadline
	}
	// A config reload keeps the live table: the quota stays 10.
	if err := g.Load([]byte(strings.Replace(cfg, "namespace: dims", "namespace: dims2", 1)), "test"); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", base+"/q", map[string]string{"X-Tenant": "initech"}); r.header.Get("X-RateLimit-Limit-Minute") != "10" {
		t.Errorf("after reload: %v", r.header)
	}
}

// TestDimensionsOverrideWindows: an override's windows replace the
// plugin's in the headers; an override the policy cannot apply (a window
// of 1.5 s) leaves the plugin's limits in force, never a failed request.
func TestDimensionsOverrideWindows(t *testing.T) {
	up := echoUpstream(t)
	cfg := strings.Replace(withUpstream(dimsConfig, up), "OVERRIDES_SOURCE", "", 1)
	cfg = strings.Replace(cfg, "window_type: fixed}\n", "window_type: fixed}\n        - {dimension: tenant, value: hourly, limit: [4], window_size: [3600]}\n        - {dimension: tenant, value: odd, limit: [9], window_size: [1.5]}\n", 1)
	_, base := startGateway(t, cfg, Options{})
	r := do(t, "GET", base+"/a", map[string]string{"X-Tenant": "hourly"})
	if r.status != 200 || r.header.Get("X-RateLimit-Limit-Hour") != "4" || r.header.Get("X-RateLimit-Remaining-Hour") != "3" || r.header.Get("X-RateLimit-Limit-Minute") != "" {
		t.Errorf("hourly: %d %v, want the override's hour window only", r.status, r.header)
	}
	if n := countAllowed(t, base, "/a", map[string]string{"X-Tenant": "odd"}, 3); n != 1 {
		t.Errorf("odd: %d allowed, want the plugin's 1", n)
	}
}
