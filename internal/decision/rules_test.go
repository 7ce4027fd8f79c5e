package decision

import (
	"context"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestWildcardAnywhere: "*" matches any run of characters wherever it
// stands in a value; a value without "*" is compared whole.
func TestWildcardAnywhere(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - {key: k, value: "bar*b", rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: k, value: "foo*bar*baz", rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: k, value: "pre*", rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: k, value: "*suf", rate_limit: {unit: minute, requests_per_unit: 4}}
  - {key: k, value: "lit", rate_limit: {unit: minute, requests_per_unit: 5}}
`)
	tree := compileTree("d", cfg.Domains[0].Descriptors)
	for _, tc := range []struct {
		value string
		want  uint32 // 0: no rule
	}{
		{"barb", 1}, {"bar-xyz-b", 1}, {"bar", 0}, {"barbx", 0},
		{"foobarbaz", 2}, {"foo1bar2baz", 2}, {"foo-baz", 0}, {"foobazbar", 0},
		{"pre", 3}, {"prefix", 3},
		{"suf", 4}, {"a-suf", 4},
		{"lit", 5}, {"lit2", 0}, {"l*t", 0},
	} {
		n := tree.lookup(1, func(int) (string, string) { return "k", tc.value })
		var got uint32
		if n != nil {
			got = n.rule.specs[0].RequestsPerUnit
		}
		if got != tc.want {
			t.Errorf("%q: limit %d, want %d", tc.value, got, tc.want)
		}
	}
}

// TestKeyWildcard: a configured key with "*" in it is matched, as in
// envoyproxy/ratelimit, against the request entry's key and value joined
// with "_": "hdr*" matches (hdrX, v) and (hdr, anything); "a*_lit" (key
// "a*", value "lit") matches keys starting with "a" whose value ends the
// joined string with "_lit". Exact entries and plain keys come first, and a
// share_threshold key wildcard counts each request key under the pattern.
func TestKeyWildcard(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - {key: exact, rate_limit: {unit: minute, requests_per_unit: 9}}
  - {key: "hdr*", rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: "a*", value: lit, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: "s*", share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 3}}
`)
	tree := compileTree("d", cfg.Domains[0].Descriptors)
	for _, tc := range []struct {
		key, value string
		want       uint32 // 0: no rule
	}{
		{"hdrX", "v", 1}, {"hdr", "", 1}, {"hdr", "any", 1}, {"hd", "r", 0},
		{"ab", "lit", 2}, {"a", "lit", 2}, {"ab", "lit2", 0}, {"b", "lit", 0},
		{"exact", "v", 9}, {"exac", "t", 0},
	} {
		n := tree.lookup(1, func(int) (string, string) { return tc.key, tc.value })
		var got uint32
		if n != nil {
			got = n.rule.specs[0].RequestsPerUnit
		}
		if got != tc.want {
			t.Errorf("(%q, %q): limit %d, want %d", tc.key, tc.value, got, tc.want)
		}
	}
	// A share_threshold key wildcard counts (s1, a) under s1 and the
	// pattern, in sluice's keys and the peer's Redis keys, as
	// envoyproxy/ratelimit does (its key s1_s*); its statistics are named by
	// the configured path.
	d := desc("s1", "a")
	n := tree.lookup(1, func(int) (string, string) { return "s1", "a" })
	if got := envoyKey("", "d", d, n); got != "d_s1_s*_" {
		t.Errorf("envoyKey = %q, want d_s1_s*_", got)
	}
	if got, other := counterKey("d", d, n), counterKey("d", desc("s1", "b"), n); got != other {
		t.Errorf("counter keys of (s1, a) and (s1, b) differ: %q, %q", got, other)
	}
	if got := statName("d", d, match{node: n, rule: n.rule}); got != "d.s*" {
		t.Errorf("statName = %q, want the configured path d.s*", got)
	}

	// With value_to_metric below it, a key wildcard is named as the peer
	// names it: the request key and the pattern less "key_".
	vt := compileTree("d", mustParse(t, `
domain: d
descriptors:
  - key: "hdr*"
    descriptors:
      - {key: sub, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`).Domains[0].Descriptors)
	vd := desc("hdrX", "v", "sub", "1")
	vn := vt.lookup(2, func(i int) (string, string) { return vd.Entries[i].Key, vd.Entries[i].Value })
	if vn == nil {
		t.Fatal("(hdrX, v), (sub, 1) matched nothing")
	}
	if got := statName("d", vd, match{node: vn, rule: vn.rule}); got != "d.hdrX_hdr*.sub_1" {
		t.Errorf("statName = %q, want d.hdrX_hdr*.sub_1", got)
	}

	// Decided through the service: the pattern limits, once per counter.
	s := newService(t, `
domain: d
descriptors:
  - {key: "hdr*", rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: "s*", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 1}}
`, newClock(t0).opts())
	for _, c := range []struct {
		key, value string
		want       rlspb.RateLimitResponse_Code
	}{
		{"hdrX", "v", rlspb.RateLimitResponse_OK},
		{"hdrX", "v", rlspb.RateLimitResponse_OVER_LIMIT},
		{"hdrY", "v", rlspb.RateLimitResponse_OK}, // its own counter
		{"s1", "a", rlspb.RateLimitResponse_OK},
		{"s1", "b", rlspb.RateLimitResponse_OVER_LIMIT}, // shared across values
	} {
		resp, err := s.ShouldRateLimit(context.Background(), request("d", desc(c.key, c.value)))
		if err != nil || resp.OverallCode != c.want {
			t.Fatalf("(%s, %s): %v %v, want %v", c.key, c.value, resp.GetOverallCode(), err, c.want)
		}
	}
}

// TestWholeSecondReset: duration_until_reset is in whole seconds, rounded
// up, as envoyproxy/ratelimit answers it.
func TestWholeSecondReset(t *testing.T) {
	clk := newClock(t0.Add(300 * time.Millisecond)) // 10.3 s into the minute
	svc := newService(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}, {key: z, rate_limit: {unit: minute, requests_per_unit: 0}}]\n", clk.opts())
	for _, key := range []string{"k", "z"} {
		resp, err := svc.Decide(context.Background(), request("d", desc(key, "v")), clk.now())
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != 50*time.Second {
			t.Errorf("%s: duration_until_reset %s, want 50s", key, got)
		}
	}
}

// TestOverrideInUnknownDomain: a descriptor's own limit override in a
// domain the configuration does not have limits nothing, as in
// envoyproxy/ratelimit (and as docs/decision-service.md says of unknown
// domains).
func TestOverrideInUnknownDomain(t *testing.T) {
	eachBackendYAML(t, envoyConfig, Options{}, func(t *testing.T, b backend) {
		c := b.c
		d := desc("anything", "x")
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_MINUTE}
		for i := 0; i < 3; i++ {
			resp := call(t, c, request("no-such-domain", d))
			if resp.OverallCode != OK || resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("call %d: %v", i, resp)
			}
		}
	})
}

// TestPeerResponseHeaders: response_headers: true writes the headers
// envoyproxy/ratelimit writes with LIMIT_RESPONSE_HEADERS_ENABLED, from the
// status with the least remaining, under names it lets you change.
func TestPeerResponseHeaders(t *testing.T) {
	const cfg = `
response_headers: true
domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1000}}
`
	hdrs := func(resp *rlspb.RateLimitResponse) string {
		var b strings.Builder
		for _, h := range resp.ResponseHeadersToAdd {
			b.WriteString(h.Key + ": " + h.Value + "\n")
		}
		return b.String()
	}
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		b.clk.set(t0.Add(2 * time.Second))
		resp := call(t, b.c, request("d", desc("a", "1"), desc("b", "1")))
		if got, want := hdrs(resp), "RateLimit-Limit: 10\nRateLimit-Remaining: 9\nRateLimit-Reset: 48\n"; got != want {
			t.Errorf("headers\n%s\nwant\n%s", got, want)
		}
	})
	named := strings.Replace(cfg, "response_headers: true", "response_headers: true\nresponse_header_names: {limit: A-Limit, remaining: A-Remaining, reset: A-Reset}", 1)
	eachBackendYAML(t, named, Options{}, func(t *testing.T, b backend) {
		if got, want := hdrs(call(t, b.c, request("d", desc("b", "1")))), "A-Limit: 1000\nA-Remaining: 999\nA-Reset: 50\n"; got != want {
			t.Errorf("named headers\n%s\nwant\n%s", got, want)
		}
	})
	for _, bad := range []struct{ cfg, want string }{
		{"response_header_format: ietf\n", `response_header_format: unknown format "ietf"`},
		{"response_header_format: draft_03\nresponse_header_names: {limit: X}\n", "response_header_names: only for response_header_format ratelimit"},
		{"response_header_names: {limt: X}\n", "response_header_names.limt: unknown field"},
	} {
		if _, err := Parse([]byte(bad.cfg + cfg)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %s", bad.cfg, err, bad.want)
		}
	}
}

// TestPeerScalarsAndDefaults: files envoyproxy/ratelimit reads start here
// too: numeric and boolean descriptor values are their text, and a
// rate_limit without requests_per_unit allows 0 (every request is denied).
func TestPeerScalarsAndDefaults(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - {key: status, value: 200, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: beta, value: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: blocked, rate_limit: {unit: minute}}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		if resp := call(t, c, request("d", desc("status", "200"))); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
			t.Errorf("value: 200 did not match \"200\": %v", resp)
		}
		if resp := call(t, c, request("d", desc("beta", "true"))); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Errorf("value: true did not match \"true\": %v", resp)
		}
		if resp := call(t, c, request("d", desc("blocked", "x"))); resp.OverallCode != OVER {
			t.Errorf("a rate_limit without requests_per_unit: %v, want OVER_LIMIT", resp)
		}
	})
}
