package decision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// A file using every field of envoyproxy/ratelimit's format loads.
const peerFields = `
domain: shop
descriptors:
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: plan
        value: gold
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: service
    value: billing
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      quota: {name: billing, tier: 2}
      tags: [a, b]
  - key: service
    value: search
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      quota: {name: search, extra: true}
  - key: path
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: own/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func TestPeerFieldsParse(t *testing.T) {
	cfg := mustParse(t, peerFields)
	d := cfg.Domains[0].Descriptors
	if !d[0].ValueToMetric || !d[0].Descriptors[0].DetailedMetric || !d[1].QuotaMode || !d[3].ShareThreshold {
		t.Errorf("flags not read: %+v", d)
	}
	if got := d[1].Metadata.GetFields()["quota"].GetStructValue().GetFields()["tier"].GetNumberValue(); got != 2 {
		t.Errorf("metadata tier = %v", got)
	}
	for _, tc := range []struct{ yml, want string }{
		{"domain: d\ndescriptors: [{key: k, value: v, share_threshold: true}]\n", `line 2: descriptors[0].share_threshold: only for a wildcard value (one with "*"), got "v"`},
		{"domain: d\ndescriptors: [{key: k, metadata: [1, 2]}]\n", "line 2: descriptors[0].metadata: expected an object, got a list"},
		{"domain: d\ndescriptors: [{key: k, quota_mode: yes please}]\n", "line 2: descriptors[0].quota_mode: expected true or false, got a string"},
	} {
		_, err := Parse([]byte(tc.yml))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yml, err, tc.want)
		}
	}
}

// quota_mode: a quota descriptor over its limit says OVER_LIMIT in its
// status, but the request is over limit only when every quota descriptor
// is, or any other descriptor is.
func TestQuotaMode(t *testing.T) {
	billing, search := desc("service", "billing"), desc("service", "search")
	eachBackendYAML(t, peerFields, Options{}, func(t *testing.T, b backend) {
		runSteps(t, b.c, []step{
			{"both within", request("shop", billing, search), OK, codes_(OK, OK), []uint32{0, 0}, nil},
			{"billing over alone", request("shop", billing), OVER, codes_(OVER), nil, nil},
			{"billing over, search too", request("shop", billing, search), OVER, codes_(OVER, OVER), nil, nil},
		})
	})
	eachBackendYAML(t, peerFields, Options{}, func(t *testing.T, b backend) {
		runSteps(t, b.c, []step{
			{"billing 1", request("shop", billing), OK, codes_(OK), nil, nil},
			{"billing over, search within", request("shop", billing, search), OK, codes_(OVER, OK), nil, nil},
			{"plain 1", request("shop", desc("plain", "x")), OK, codes_(OK), nil, nil},
		})
	})
	// QUOTA_MODE makes every descriptor a quota.
	eachBackendYAML(t, peerFields, Options{QuotaMode: true}, func(t *testing.T, b backend) {
		p := desc("plain", "y")
		runSteps(t, b.c, []step{
			{"1", request("shop", p), OK, codes_(OK), nil, nil},
			{"2", request("shop", p), OK, codes_(OK), nil, nil},
			{"3", request("shop", p, desc("plain", "z")), OK, codes_(OK, OK), nil, nil},
			{"4 over, z within", request("shop", p, desc("plain", "z")), OK, codes_(OVER, OK), nil, nil},
			{"4 over alone", request("shop", p), OVER, codes_(OVER), nil, nil},
		})
	})
}

// RESPONSE_DYNAMIC_METADATA: the domain, the request's descriptors and
// hitsAddend, and the merged metadata of the descriptors within their
// limits.
func TestDynamicMetadata(t *testing.T) {
	own := desc("service", "search")
	own.HitsAddend = wrapperspb.UInt64(1)
	req := request("shop", desc("service", "billing"), own, desc("plain", "x"))
	req.HitsAddend = 1
	eachBackendYAML(t, peerFields, Options{DynamicMetadata: true}, func(t *testing.T, b backend) {
		c := b.c
		got := func() string {
			b, err := protojson.Marshal(call(t, c, req).DynamicMetadata)
			if err != nil {
				t.Fatal(err)
			}
			return strings.ReplaceAll(string(b), " ", "")
		}
		first := got()
		for _, want := range []string{`"domain":"shop"`, `"hitsAddend":1`,
			`{"entries":["service=billing"]}`, `{"entries":["service=search"],"hitsAddend":1}`,
			`"metadata":{"quota":{"extra":true,"name":"billing","tier":2},"tags":["a","b"]}`} {
			if !strings.Contains(first, want) {
				t.Errorf("first call: %s lacks %s", first, want)
			}
		}
		// Both quotas are now spent: no descriptor with metadata passes.
		if second := got(); strings.Contains(second, `"metadata"`) {
			t.Errorf("second call still has metadata: %s", second)
		}
	})
	// Off by default.
	c2, _ := serveGRPC(t, newService(t, peerFields, newClock(t0).opts()))
	if md := call(t, c2, req).DynamicMetadata; md != nil {
		t.Errorf("dynamic metadata without the option: %v", md)
	}
}

// share_threshold: every value matching the wildcard counts in one counter;
// without it each value has its own.
func TestShareThreshold(t *testing.T) {
	eachBackendYAML(t, peerFields, Options{}, func(t *testing.T, b backend) {
		c := b.c
		runSteps(t, c, []step{
			{"files/a", request("shop", desc("path", "files/a.pdf")), OK, codes_(OK), []uint32{1}, nil},
			{"files/b", request("shop", desc("path", "files/b.csv")), OK, codes_(OK), []uint32{0}, nil},
			{"files/c", request("shop", desc("path", "files/c.txt")), OVER, codes_(OVER), nil, nil},
			{"own/a", request("shop", desc("path", "own/a")), OK, codes_(OK), []uint32{1}, nil},
			{"own/b", request("shop", desc("path", "own/b")), OK, codes_(OK), []uint32{1}, nil},
		})
	})
}

// envoyproxy/ratelimit's statistics keep its names: the configured path,
// the request's values with detailed_metric and value_to_metric, the
// pattern for share_threshold; hits, not requests.
func TestPeerStatNames(t *testing.T) {
	eachBackendYAML(t, peerFields, Options{PeerStats: true}, func(t *testing.T, b backend) {
		s, c := b.s, b.c
		for range 4 {
			call(t, c, request("shop", desc("plain", "x")))
		}
		call(t, c, request("shop", desc("tenant", "acme", "plan", "gold")))
		call(t, c, request("shop", desc("path", "files/a")))
		call(t, c, request("shop", desc("path", "own/b")))
		got := map[string]uint64{}
		for _, st := range s.PeerStats() {
			got[st.Name] = st.Value
		}
		for name, want := range map[string]uint64{
			"ratelimit.service.rate_limit.shop.plain.total_hits":                  4,
			"ratelimit.service.rate_limit.shop.plain.within_limit":                3,
			"ratelimit.service.rate_limit.shop.plain.over_limit":                  1,
			"ratelimit.service.rate_limit.shop.plain.near_limit":                  1,
			"ratelimit.service.rate_limit.shop.tenant_acme.plan_gold.total_hits":  1,
			"ratelimit.service.rate_limit.shop.path_files/*.total_hits":           1,
			"ratelimit.service.rate_limit.shop.path_own/*.within_limit":           1,
			"ratelimit.service.rate_limit.shop.tenant_acme.plan_gold.over_limit":  0,
			"ratelimit.service.global_shadow_mode":                                0,
			"ratelimit.service.rate_limit.shop.plain.over_limit_with_local_cache": 0,
		} {
			if v, ok := got[name]; !ok || v != want {
				t.Errorf("%s = %d (present %v), want %d", name, v, ok, want)
			}
		}
	})
}

// The local over-limit cache answers a key found over its limit without
// the store until its window ends, and counts it in
// over_limit_with_local_cache.
func TestLocalOverLimitCache(t *testing.T) {
	eachBackendYAML(t, peerFields, Options{PeerStats: true, LocalCacheBytes: 1 << 20}, func(t *testing.T, b backend) {
		s, c := b.s, b.c
		clk := b.clk
		p := request("shop", desc("plain", "x"))
		runSteps(t, c, []step{
			{"1", p, OK, codes_(OK), nil, nil}, {"2", p, OK, codes_(OK), nil, nil}, {"3", p, OK, codes_(OK), nil, nil},
			{"4 over", p, OVER, codes_(OVER), nil, nil},
			{"5 cached", p, OVER, codes_(OVER), nil, nil},
		})
		got := map[string]uint64{}
		for _, st := range s.PeerStats() {
			got[st.Name] = st.Value
		}
		if got["ratelimit.service.rate_limit.shop.plain.over_limit_with_local_cache"] != 1 || got["ratelimit.service.rate_limit.shop.plain.over_limit"] != 2 {
			t.Errorf("stats: %v", got)
		}
		clk.add(60e9) // the next minute
		runSteps(t, c, []step{{"next window", p, OK, codes_(OK), []uint32{2}, nil}})
	})
}

func TestParseFiles(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors: [{key: a, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")}
	b := File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors: [{key: b, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")}
	b2 := File{Name: "c.yaml", Data: []byte("domain: d\ndescriptors: [{key: b, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")}
	set1 := File{Name: "s1.yaml", Data: []byte("response_headers: true\ndomain: e\ndescriptors: [{key: x}]\n")}
	set2 := File{Name: "s2.yaml", Data: []byte("shadow_mode: true\ndomains: [{domain: f, descriptors: [{key: x}]}]\n")}
	bad := File{Name: "bad.yaml", Data: []byte("domain: g\ndescriptors: [{key: x, colour: red}]\n")}

	// No files: no domains, as envoyproxy/ratelimit reads an empty directory.
	if cfg, err := ParseFiles(nil, ParseOptions{}); err != nil || len(cfg.Domains) != 0 || cfg.Store.Type != "memory" {
		t.Errorf("no files: %+v, %v; want a configuration without domains", cfg, err)
	}
	cfg, err := ParseFiles([]File{a, b, set1}, ParseOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 2 || len(cfg.Domains[0].Descriptors) != 2 || !cfg.ResponseHeaders {
		t.Errorf("merged: %+v", cfg)
	}
	for _, tc := range []struct {
		files []File
		merge bool
		want  string
	}{
		{[]File{a, b}, false, `b.yaml: domain: duplicate domain "d", also in a.yaml (set MERGE_DOMAIN_CONFIG to merge them)`},
		{[]File{a, b, b2}, true, `c.yaml: descriptors[0]: duplicate descriptor key "b" value "" in merged domain "d", also in a.yaml`},
		{[]File{set1, set2}, false, "s2.yaml: shadow_mode: also set in s1.yaml"},
		{[]File{a, bad}, false, "line 2: bad.yaml: descriptors[0].colour: unknown field"},
	} {
		_, err := ParseFiles(tc.files, ParseOptions{MergeDomains: tc.merge})
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.files, err, tc.want)
		}
	}
}

// LIMIT_RESPONSE_HEADERS_ENABLED with its names, and SHADOW_MODE, from
// Options.
func TestPeerResponseOptions(t *testing.T) {
	names := &HeaderNames{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"}
	eachBackendYAML(t, peerFields, Options{ResponseHeaders: names, ShadowMode: true}, func(t *testing.T, b backend) {
		c := b.c
		p := request("shop", desc("plain", "x"))
		var resp *rlspb.RateLimitResponse
		for range 4 {
			resp = call(t, c, p)
		}
		if resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Errorf("shadow mode: %v", resp)
		}
		h := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		if h["X-Limit"] != "3" || h["X-Left"] != "0" || h["X-Reset"] != "50" {
			t.Errorf("headers: %v", h)
		}
	})
}

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: while one descriptor of a
// request is over its limit, the others are not counted.
func TestStopIncrementWhenOverLimit(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5}}
`
	a, b := desc("a", "x"), desc("b", "x")
	eachBackendYAML(t, cfg, Options{StopIncrementWhenOverLimit: true}, func(t *testing.T, be backend) {
		runSteps(t, be.c, []step{
			{"both", request("d", a, b), OK, codes_(OK, OK), []uint32{0, 4}, nil},
			{"a over: b not counted", request("d", a, b), OVER, codes_(OVER, OK), []uint32{0, 4}, nil},
			{"again", request("d", a, b), OVER, codes_(OVER, OK), []uint32{0, 4}, nil},
			{"b alone counts", request("d", b), OK, codes_(OK), []uint32{3}, nil},
		})
	})
	// Without the option b is counted each time.
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, be backend) {
		runSteps(t, be.c, []step{
			{"both", request("d", a, b), OK, codes_(OK, OK), []uint32{0, 4}, nil},
			{"a over: b counted", request("d", a, b), OVER, codes_(OVER, OK), []uint32{0, 3}, nil},
		})
	})
}

// CountDenied: a denied call's hits are counted, as envoyproxy/ratelimit
// increments before it compares; the default is all or nothing.
func TestCountDenied(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 10}}
`
	for _, tc := range []struct {
		countDenied bool
		after       rlspb.RateLimitResponse_Code
	}{{false, OK}, {true, OVER}} {
		eachBackendYAML(t, cfg, Options{CountDenied: tc.countDenied}, func(t *testing.T, b backend) {
			c := b.c
			big := request("d", desc("k", "v"))
			big.HitsAddend = 8
			call(t, c, big)
			if got := call(t, c, big).OverallCode; got != OVER {
				t.Fatalf("countDenied %v: second 8: %v", tc.countDenied, got)
			}
			if got := call(t, c, request("d", desc("k", "v"))).OverallCode; got != tc.after {
				t.Errorf("countDenied %v: one more after the denied 8: %v, want %v", tc.countDenied, got, tc.after)
			}
		})
	}
}

// The same envoyproxy/ratelimit cases on a real redis-server: quotas,
// shared wildcard thresholds and check-only calls decide alike.
func TestPeerCasesOnRedis(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	store := fmt.Sprintf("store:\n  type: redis\n  redis: {host: %s, port: %d, clock: service, timeout: 2s}\n", r.Host(), r.Port())
	s, err := Open(mustParse(t, store+peerFields), newClock(t0).opts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	billing, search := desc("service", "billing"), desc("service", "search")
	check := desc("plain", "x")
	check.HitsAddend = wrapperspb.UInt64(0)
	runSteps(t, c, []step{
		{"files/a", request("shop", desc("path", "files/a.pdf")), OK, codes_(OK), []uint32{1}, nil},
		{"files/b", request("shop", desc("path", "files/b.csv")), OK, codes_(OK), []uint32{0}, nil},
		{"files/c", request("shop", desc("path", "files/c.txt")), OVER, codes_(OVER), nil, nil},
		{"billing 1", request("shop", billing), OK, codes_(OK), nil, nil},
		{"billing over, search within", request("shop", billing, search), OK, codes_(OVER, OK), nil, nil},
		{"both over", request("shop", billing, search), OVER, codes_(OVER, OVER), nil, nil},
		{"check", request("shop", check), OK, codes_(OK), []uint32{3}, nil},
		{"hit", request("shop", desc("plain", "x")), OK, codes_(OK), []uint32{2}, nil},
		{"check after", request("shop", check), OK, codes_(OK), []uint32{2}, nil},
	})
}

// A call of several hits over the limit counts, as in envoyproxy/ratelimit,
// only its hits past the limit as over_limit (all of them once the count
// was already over) and those between the near-limit threshold and the
// limit as near_limit; in shadow mode shadow_mode counts what over_limit
// does. Limit 10, near-limit threshold 8: 12 hits from 0 are 2 over and 2
// near; 7 hits from 0 are within; 5 hits from 7 are 2 over and 2 near; the
// same for a token bucket of 10 an hour (nothing refills in the test). A request for a domain not configured counts domain_not_found, once per
// descriptor.
func TestPeerStatsMultiHit(t *testing.T) {
	cfg := `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: s, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: b, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}}
`
	eachBackendYAML(t, cfg, Options{PeerStats: true}, func(t *testing.T, b backend) {
		for _, c := range []struct {
			key  string
			hits uint32
		}{{"k", 12}, {"k", 7}, {"k", 5}, {"s", 12}, {"b", 12}, {"b", 7}, {"b", 5}} {
			r := request("d", desc(c.key, "v"))
			r.HitsAddend = c.hits
			call(t, b.c, r)
		}
		call(t, b.c, request("nope", desc("k", "v"), desc("k", "w")))
		got := map[string]uint64{}
		for _, st := range b.s.PeerStats() {
			got[st.Name] = st.Value
		}
		for name, want := range map[string]uint64{
			"k.total_hits": 24, "k.over_limit": 4, "k.near_limit": 4, "k.within_limit": 7,
			"s.total_hits": 12, "s.over_limit": 2, "s.near_limit": 2, "s.shadow_mode": 2,
			"b.total_hits": 24, "b.over_limit": 4, "b.near_limit": 4, "b.within_limit": 7,
		} {
			if v := got["ratelimit.service.rate_limit.d."+name]; v != want {
				t.Errorf("%s = %d, want %d", name, v, want)
			}
		}
		// A request for a domain not configured counts its descriptors.
		if v := got["ratelimit.service.rate_limit.nope.domain_not_found"]; v != 2 {
			t.Errorf("nope.domain_not_found = %d, want 2", v)
		}
	})
}

// Statistic names are made safe as envoyproxy/ratelimit makes them (":"
// and "|" to "_", the dots of an IPv4 address to "_"), and a name from a
// request cannot carry a line of its own: control characters become "_".
func TestSanitizeStatName(t *testing.T) {
	for in, want := range map[string]string{
		"d.remote_address_10.0.0.1":           "d.remote_address_10_0_0_1",
		"d.k_a:b|c":                           "d.k_a_b_c",
		"x:999|g\nratelimit.service.x:1000|c": "x_999_g_ratelimit.service.x_1000_c",
		"d.version_1.2":                       "d.version_1.2",
		"d.plain.k_v":                         "d.plain.k_v",
	} {
		if got := sanitizeStatName(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	s := newService(t, "domain: d\ndescriptors: [{key: k, detailed_metric: true, rate_limit: {unit: hour, requests_per_unit: 5}}]\n",
		func() Options { o := newClock(t0).opts(); o.PeerStats = true; return o }())
	for _, r := range []*rlspb.RateLimitRequest{
		request("x:1|g\nfake.over_limit:1000000|c\nz", desc("k", "v")),
		request("d", desc("k", "10.0.0.1\nfake:1|c")),
	} {
		if _, err := s.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range s.PeerStats() {
		if strings.ContainsAny(st.Name, "\n:|") {
			t.Errorf("unsafe statistic name %q", st.Name)
		}
	}
}
