package kongconf

import (
	"os"
	"reflect"
	"testing"
	"time"
)

// TestDeckUpstreamsDump: upstreams, targets, certificates and snis as decK
// dumps them (every field, nulls included) load, with Kong's defaults and
// the links made.
func TestDeckUpstreamsDump(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/deck_upstreams.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Upstreams[0]
	if cfg.Services[0].Upstream != u {
		t.Error("the service whose host is the upstream's name is not linked to it")
	}
	if u.Algorithm != "consistent-hashing" || u.HashOn != "header" || u.HashOnHeader != "X-Tenant" || u.HashFallback != "ip" || u.Slots != 10000 || u.HashOnCookiePath != "/" {
		t.Errorf("upstream %+v", u)
	}
	a := u.Healthchecks.Active
	if a.Type != "http" || a.Timeout != time.Second || a.Concurrency != 10 || a.HTTPPath != "/" || !a.HTTPSVerifyCertificate ||
		!reflect.DeepEqual(a.Unhealthy.HTTPStatuses, []int{429, 404, 500, 501, 502, 503, 504, 505}) {
		t.Errorf("active checks %+v", a)
	}
	if len(u.Targets) != 2 || u.Targets[0].Addr() != "10.0.0.11:8080" || u.Targets[1].Port != 8000 || u.Targets[1].Weight != 0 {
		t.Errorf("targets %+v %+v", u.Targets[0], u.Targets[1])
	}
	c := cfg.Certificates[0]
	if len(c.Pairs) != 1 || len(c.SNIs) != 2 || c.SNIs[1].Name != "*.orders.example.com" || c.SNIs[1].Certificate != c {
		t.Errorf("certificate %d pairs, snis %+v", len(c.Pairs), c.SNIs)
	}
	// Defaults when a file sets nothing.
	cfg, err = parse([]byte("_format_version: \"3.0\"\nupstreams: [{name: u, targets: [{target: h}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	u = cfg.Upstreams[0]
	p := u.Healthchecks.Passive
	if u.Algorithm != "round-robin" || u.HashOn != "none" || p.Type != "http" || len(p.Healthy.HTTPStatuses) != 19 ||
		!reflect.DeepEqual(p.Unhealthy.HTTPStatuses, []int{429, 500, 503}) || u.Healthchecks.Active.Healthy.Interval != 0 ||
		u.Targets[0].Weight != 100 || u.Targets[0].Addr() != "h:8000" {
		t.Errorf("defaults: %+v", u)
	}
}
