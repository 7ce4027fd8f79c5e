package decision

import (
	"context"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
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
	tree := compileTree(cfg.Domains[0].Descriptors)
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
		r := tree.lookup(1, func(int) (string, string) { return "k", tc.value })
		var got uint32
		if r != nil {
			got = r.specs[0].RequestsPerUnit
		}
		if got != tc.want {
			t.Errorf("%q: limit %d, want %d", tc.value, got, tc.want)
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
	c, _ := serveGRPC(t, newService(t, envoyConfig, newClock(t0).opts()))
	d := desc("anything", "x")
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_MINUTE}
	for i := 0; i < 3; i++ {
		resp := call(t, c, request("no-such-domain", d))
		if resp.OverallCode != OK || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
}
