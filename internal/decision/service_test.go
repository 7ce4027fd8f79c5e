package decision

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

const (
	OK   = rlspb.RateLimitResponse_OK
	OVER = rlspb.RateLimitResponse_OVER_LIMIT
)

// envoyConfig is an envoyproxy/ratelimit file, unchanged: it must mean the
// same thing here.
const envoyConfig = `
domain: edge
descriptors:
  # every remote address: 3 per minute
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  # one address is trusted
  - key: remote_address
    value: 10.0.0.1
    rate_limit:
      unlimited: true
  # one address is blocked
  - key: remote_address
    value: 10.6.6.6
    rate_limit:
      unit: second
      requests_per_unit: 0
  # nested: per path under a client id, default and specific
  - key: client_id
    value: acme
    descriptors:
      - key: path
        rate_limit:
          unit: second
          requests_per_unit: 2
      - key: path
        value: /login
        rate_limit:
          unit: hour
          requests_per_unit: 1
  - key: client_id
    descriptors:
      - key: path
        rate_limit:
          unit: day
          requests_per_unit: 5
  # wildcard values
  - key: user
    value: bot-*
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: watched
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

type step struct {
	name      string
	req       *rlspb.RateLimitRequest
	overall   rlspb.RateLimitResponse_Code
	codes     []rlspb.RateLimitResponse_Code
	remaining []uint32
	limits    []uint32 // RequestsPerUnit of each status's CurrentLimit; math.MaxUint32 means none
}

const noLimit = math.MaxUint32

func runSteps(t *testing.T, c rlspb.RateLimitServiceClient, steps []step) {
	t.Helper()
	for i, s := range steps {
		resp := call(t, c, s.req)
		if resp.OverallCode != s.overall {
			t.Errorf("step %d (%s): overall %s, want %s", i, s.name, resp.OverallCode, s.overall)
		}
		if len(resp.Statuses) != len(s.codes) {
			t.Fatalf("step %d (%s): %d statuses, want %d", i, s.name, len(resp.Statuses), len(s.codes))
		}
		for j, st := range resp.Statuses {
			if st.Code != s.codes[j] {
				t.Errorf("step %d (%s): status %d code %s, want %s", i, s.name, j, st.Code, s.codes[j])
			}
			if s.remaining != nil && st.LimitRemaining != s.remaining[j] {
				t.Errorf("step %d (%s): status %d remaining %d, want %d", i, s.name, j, st.LimitRemaining, s.remaining[j])
			}
			if s.limits != nil {
				got := uint32(noLimit)
				if st.CurrentLimit != nil {
					got = st.CurrentLimit.RequestsPerUnit
				}
				if got != s.limits[j] {
					t.Errorf("step %d (%s): status %d limit %d, want %d", i, s.name, j, got, s.limits[j])
				}
			}
		}
	}
}

func codes_(cs ...rlspb.RateLimitResponse_Code) []rlspb.RateLimitResponse_Code { return cs }

func TestDescriptorMatching(t *testing.T) {
	eachBackendYAML(t, envoyConfig, Options{}, func(t *testing.T, b backend) {
		c := b.c
		ip := func(v string) *rlspb.RateLimitRequest { return request("edge", desc("remote_address", v)) }
		path := func(client, p string) *rlspb.RateLimitRequest {
			return request("edge", desc("client_id", client, "path", p))
		}
		runSteps(t, c, []step{
			// A key-only descriptor gives every value its own counter.
			{"ip a 1", ip("10.0.0.2"), OK, codes_(OK), []uint32{2}, []uint32{3}},
			{"ip a 2", ip("10.0.0.2"), OK, codes_(OK), []uint32{1}, nil},
			{"ip b 1", ip("10.0.0.3"), OK, codes_(OK), []uint32{2}, nil},
			{"ip a 3", ip("10.0.0.2"), OK, codes_(OK), []uint32{0}, nil},
			{"ip a 4", ip("10.0.0.2"), OVER, codes_(OVER), []uint32{0}, []uint32{3}},
			// A value match wins over the default.
			{"trusted", ip("10.0.0.1"), OK, codes_(OK), []uint32{math.MaxUint32}, []uint32{noLimit}},
			{"blocked", ip("10.6.6.6"), OVER, codes_(OVER), []uint32{0}, []uint32{0}},
			// Nested: the specific client's default path, its /login, and the
			// default client's paths.
			{"acme /a 1", path("acme", "/a"), OK, codes_(OK), []uint32{1}, []uint32{2}},
			{"acme /a 2", path("acme", "/a"), OK, codes_(OK), []uint32{0}, nil},
			{"acme /a 3", path("acme", "/a"), OVER, codes_(OVER), nil, nil},
			{"acme /b 1", path("acme", "/b"), OK, codes_(OK), []uint32{1}, nil},
			{"acme /login 1", path("acme", "/login"), OK, codes_(OK), []uint32{0}, []uint32{1}},
			{"acme /login 2", path("acme", "/login"), OVER, codes_(OVER), nil, nil},
			{"other /login", path("other", "/login"), OK, codes_(OK), []uint32{4}, []uint32{5}},
			// Unknown or partial descriptors are answered OK without a limit,
			// as envoyproxy/ratelimit does.
			{"unknown key", request("edge", desc("nope", "x")), OK, codes_(OK), []uint32{0}, []uint32{noLimit}},
			{"too short", request("edge", desc("client_id", "acme")), OK, codes_(OK), nil, []uint32{noLimit}},
			{"too long", request("edge", desc("remote_address", "10.0.0.9", "path", "/")), OK, codes_(OK), nil, []uint32{noLimit}},
			{"unknown domain", request("nowhere", desc("remote_address", "10.0.0.2")), OK, codes_(OK), nil, []uint32{noLimit}},
			{"no entries", request("edge", desc()), OK, codes_(OK), nil, []uint32{noLimit}},
			// Wildcards match by prefix; every value still counts alone.
			{"bot-1 1", request("edge", desc("user", "bot-1")), OK, codes_(OK), nil, []uint32{1}},
			{"bot-1 2", request("edge", desc("user", "bot-1")), OVER, codes_(OVER), nil, nil},
			{"bot-2 1", request("edge", desc("user", "bot-2")), OK, codes_(OK), nil, nil},
			{"human", request("edge", desc("user", "bo")), OK, codes_(OK), nil, []uint32{noLimit}},
			// Several descriptors: each decided alone, over if any is over.
			{"mixed", request("edge", desc("remote_address", "10.0.0.2"), desc("remote_address", "10.0.0.4"), desc("nope", "")),
				OVER, codes_(OVER, OK, OK), []uint32{0, 2, 0}, nil},
			// Shadow mode: over limit, answered OK.
			{"watched 1", request("edge", desc("watched", "x")), OK, codes_(OK), []uint32{0}, nil},
			{"watched 2", request("edge", desc("watched", "x")), OK, codes_(OK), []uint32{0}, []uint32{1}},
		})
	})
}

// envoyproxy/ratelimit builds keys by joining with "_": the entries
// (a_b, c) and (a, b_c) match each other's configuration and share one
// counter. Here they do neither.
func TestKeysDoNotCollide(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: x
    value: y_z
    rate_limit: {unit: minute, requests_per_unit: 0}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		runSteps(t, c, []step{
			{"a_b=c", request("d", desc("a_b", "c")), OK, codes_(OK), nil, nil},
			{"a=b_c", request("d", desc("a", "b_c")), OK, codes_(OK), nil, nil},
			{"a_b=c again", request("d", desc("a_b", "c")), OVER, codes_(OVER), nil, nil},
			// x_y=z would match x=y_z in envoyproxy/ratelimit and be blocked.
			{"x_y=z", request("d", desc("x_y", "z")), OK, codes_(OK), nil, []uint32{noLimit}},
			{"x=y_z", request("d", desc("x", "y_z")), OVER, codes_(OVER), nil, []uint32{0}},
		})
		// Distinct descriptors, and distinct domains, never share a key.
		seen := map[string]string{}
		for _, tc := range []struct {
			domain string
			kv     []string
		}{
			{"d", []string{"a_b", "c"}}, {"d", []string{"a", "b_c"}}, {"d_a", []string{"b", "c"}},
			{"d", []string{"a", "b", "c", ""}}, {"d", []string{"a", "b_c", "", ""}}, {"d", []string{"a:1", "b"}},
			{"d", []string{"a", "1:b"}},
		} {
			k := counterKey(tc.domain, desc(tc.kv...), nil)
			name := tc.domain + " " + strings.Join(tc.kv, ",")
			if prev, dup := seen[k]; dup {
				t.Errorf("%s and %s share key %q", prev, name, k)
			}
			seen[k] = name
		}
	})
}

func FuzzCounterKey(f *testing.F) {
	f.Add("d", "a_b", "c", "a", "b_c")
	f.Add("d", "a", "", "", "a")
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string) {
		if k1 == k2 && v1 == v2 {
			return
		}
		if counterKey(domain, desc(k1, v1), nil) == counterKey(domain, desc(k2, v2), nil) {
			t.Fatalf("(%q,%q) and (%q,%q) share a key", k1, v1, k2, v2)
		}
		if counterKey(domain, desc(k1, v1), nil) == counterKey(domain, desc(k1, v1, k2, v2), nil) {
			t.Fatalf("a descriptor and its extension share a key")
		}
	})
}

func TestHitsAddend(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		withHits := func(h uint32, ds ...*rlpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
			r := request("d", ds...)
			r.HitsAddend = h
			return r
		}
		own := desc("k", "b")
		own.HitsAddend = wrapperspb.UInt64(4)
		runSteps(t, c, []step{
			{"7 hits", withHits(7, desc("k", "a")), OK, codes_(OK), []uint32{3}, nil},
			// All or nothing: 4 more do not fit and nothing is taken (a denied
			// status reports 0 remaining, as envoyproxy/ratelimit does).
			{"4 more", withHits(4, desc("k", "a")), OVER, codes_(OVER), []uint32{0}, nil},
			{"3 more", withHits(3, desc("k", "a")), OK, codes_(OK), []uint32{0}, nil},
			// A descriptor's own hits_addend overrides the request's.
			{"own 4", withHits(9, own, desc("k", "c")), OK, codes_(OK, OK), []uint32{6, 1}, nil},
			// More than the limit can ever hold.
			{"11", withHits(11, desc("k", "d")), OVER, codes_(OVER), []uint32{0}, nil},
			{"1 after 11", withHits(1, desc("k", "d")), OK, codes_(OK), []uint32{9}, nil},
		})
		neg := desc("k", "e")
		neg.IsNegativeHits = true
		// The valid descriptor before the invalid one is not counted.
		_, err := c.ShouldRateLimit(context.Background(), withHits(10, desc("k", "f"), neg))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("is_negative_hits: err %v, want InvalidArgument", err)
		}
		runSteps(t, c, []step{{"f untouched", withHits(10, desc("k", "f")), OK, codes_(OK), []uint32{0}, nil}})
	})
}

// A descriptor hits_addend of 0 (Envoy's apply_on_stream_done check)
// reads without counting: OK with what remains while one more hit fits,
// OVER_LIMIT once none does.
func TestHitsAddendZeroChecks(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		check := desc("k", "a")
		check.HitsAddend = wrapperspb.UInt64(0)
		hit := request("d", desc("k", "a"))
		runSteps(t, c, []step{
			{"check fresh", request("d", check), OK, codes_(OK), []uint32{2}, []uint32{2}},
			{"check again", request("d", check), OK, codes_(OK), []uint32{2}, nil},
			{"hit 1", hit, OK, codes_(OK), []uint32{1}, nil},
			{"check after 1", request("d", check), OK, codes_(OK), []uint32{1}, nil},
			{"hit 2", hit, OK, codes_(OK), []uint32{0}, nil},
			{"check full", request("d", check), OVER, codes_(OVER), []uint32{0}, nil},
			{"hit 3", hit, OVER, codes_(OVER), []uint32{0}, nil},
		})
	})
}

func TestInvalidRequests(t *testing.T) {
	eachBackendYAML(t, envoyConfig, Options{}, func(t *testing.T, b backend) {
		c := b.c
		for _, tc := range []struct {
			req  *rlspb.RateLimitRequest
			want string
		}{
			{request("", desc("k", "v")), "rate limit domain must not be empty"},
			{request("edge"), "rate limit descriptor list must not be empty"},
			{request("edge", &rlpb.RateLimitDescriptor{Entries: desc("k", "v").Entries,
				Limit: &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}), "descriptor 0: limit override has unknown unit UNKNOWN"},
		} {
			_, err := c.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: err %v, want InvalidArgument with %q", tc.req, err, tc.want)
			}
		}
	})
}

func TestLimitOverride(t *testing.T) {
	eachBackendYAML(t, envoyConfig, Options{}, func(t *testing.T, b backend) {
		c := b.c
		d := desc("anything", "x")
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_MINUTE}
		runSteps(t, c, []step{
			{"1", request("edge", d), OK, codes_(OK), []uint32{1}, []uint32{2}},
			{"2", request("edge", d), OK, codes_(OK), []uint32{0}, nil},
			{"3", request("edge", d), OVER, codes_(OVER), []uint32{0}, nil},
		})
		resp := call(t, c, request("edge", d))
		if got := resp.Statuses[0].CurrentLimit.Unit; got != rlspb.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("unit %s, want MINUTE", got)
		}
	})
}

func TestReplaces(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: tier
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per-ip}]
  - key: ip
    rate_limit:
      name: per-ip
      unit: minute
      requests_per_unit: 1
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		gold := func() *rlspb.RateLimitRequest { return request("d", desc("tier", "gold"), desc("ip", "1")) }
		runSteps(t, c, []step{
			{"gold 1", gold(), OK, codes_(OK, OK), []uint32{99, 0}, []uint32{100, noLimit}},
			{"gold 2", gold(), OK, codes_(OK, OK), []uint32{98, 0}, []uint32{100, noLimit}},
			// Without the replacing limit the per-ip limit applies, and was
			// never counted above.
			{"plain 1", request("d", desc("ip", "1")), OK, codes_(OK), []uint32{0}, []uint32{1}},
			{"plain 2", request("d", desc("ip", "1")), OVER, codes_(OVER), nil, nil},
		})
		resp := call(t, c, gold())
		if resp.Statuses[1].CurrentLimit != nil {
			t.Errorf("replaced limit reported: %v", resp.Statuses[1])
		}
	})
}

func TestMultipleLimitsAndAlgorithms(t *testing.T) {
	const cfg = `
algorithm: sliding
domain: d
descriptors:
  - key: user
    rate_limit:
      name: user
      limits:
        - {unit: second, requests_per_unit: 2}
        - {unit: minute, requests_per_unit: 3, algorithm: fixed}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 2}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		clk := b.clk
		u := func() *rlspb.RateLimitRequest { return request("d", desc("user", "u")) }
		runSteps(t, c, []step{
			{"1", u(), OK, codes_(OK), []uint32{1}, []uint32{2}},
			{"2", u(), OK, codes_(OK), []uint32{0}, []uint32{2}},
			// The per-second limit denies.
			{"3", u(), OVER, codes_(OVER), []uint32{0}, []uint32{2}},
		})
		clk.add(2 * time.Second)
		runSteps(t, c, []step{
			{"4", u(), OK, codes_(OK), []uint32{0}, []uint32{3}},
			{"5", u(), OVER, codes_(OVER), []uint32{0}, []uint32{3}},
		})
		resp := call(t, c, u())
		if r := resp.Statuses[0].DurationUntilReset.AsDuration(); r != 48*time.Second {
			t.Errorf("minute limit resets in %s, want 48s (window ends at :13 + 48 s = :01:00)", r)
		}
		bucket := func() *rlspb.RateLimitRequest { return request("d", desc("bucket", "b")) }
		runSteps(t, c, []step{
			{"b1", bucket(), OK, codes_(OK), []uint32{1}, []uint32{1}},
			{"b2", bucket(), OK, codes_(OK), []uint32{0}, nil},
			{"b3", bucket(), OVER, codes_(OVER), nil, nil},
		})
		clk.add(time.Second)
		runSteps(t, c, []step{{"b4", bucket(), OK, codes_(OK), []uint32{0}, nil}})
	})
}

func TestFixedWindowReset(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		clk := b.clk
		r := func() *rlspb.RateLimitRequest { return request("d", desc("k", "v")) }
		runSteps(t, c, []step{
			{"1", r(), OK, codes_(OK), []uint32{1}, nil},
			{"2", r(), OK, codes_(OK), []uint32{0}, nil},
			{"3", r(), OVER, codes_(OVER), []uint32{0}, nil},
		})
		resp := call(t, c, r())
		if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != 50*time.Second {
			t.Errorf("reset %s, want 50s", got)
		}
		clk.add(50*time.Second - time.Millisecond) // last millisecond of the window
		runSteps(t, c, []step{{"edge", r(), OVER, codes_(OVER), nil, nil}})
		clk.add(time.Millisecond) // a new fixed window: the full count again
		runSteps(t, c, []step{
			{"new 1", r(), OK, codes_(OK), []uint32{1}, nil},
			{"new 2", r(), OK, codes_(OK), []uint32{0}, nil},
		})
	})
}

func TestResponseHeadersAndGlobalShadowMode(t *testing.T) {
	const cfg = `
response_headers: true
response_header_format: draft_03
shadow_mode: true
domains:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {name: "per \"a\"", unit: minute, requests_per_unit: 5}
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
`
	eachBackendYAML(t, cfg, Options{}, func(t *testing.T, b backend) {
		c := b.c
		b.clk.set(t0.Add(250 * time.Millisecond))
		hdrs := func(resp *rlspb.RateLimitResponse) string {
			var b strings.Builder
			for _, h := range resp.ResponseHeadersToAdd {
				b.WriteString(h.Key + ": " + h.Value + "\n")
			}
			return b.String()
		}
		resp := call(t, c, request("d", desc("a", "1")))
		want := "x-ratelimit-limit: 5, 5;w=60;name=\"per \\\"a\\\"\"\nx-ratelimit-remaining: 4\nx-ratelimit-reset: 50\n"
		if got := hdrs(resp); got != want {
			t.Errorf("headers\n%s\nwant\n%s", got, want)
		}
		// The status closest to its limit is reported.
		resp = call(t, c, request("d", desc("a", "1"), desc("b", "1")))
		want = "x-ratelimit-limit: 1, 1;w=1\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 1\n"
		if got := hdrs(resp); got != want {
			t.Errorf("headers\n%s\nwant\n%s", got, want)
		}
		// Over limit, but the global shadow mode answers OK; the status tells.
		resp = call(t, c, request("d", desc("b", "1")))
		if resp.OverallCode != OK || resp.Statuses[0].Code != OVER {
			t.Errorf("shadow mode: overall %s status %s, want OK and OVER_LIMIT", resp.OverallCode, resp.Statuses[0].Code)
		}
		// No limit, no headers.
		if resp := call(t, c, request("d", desc("zzz", "1"))); len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("headers without a limit: %v", resp.ResponseHeadersToAdd)
		}
	})
}

// 64 clients on 8 connections hit one key: exactly the limit passes.
func TestExactUnderConcurrency(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 300}
  - key: s
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding}
`
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			s := newService(t, cfg, newClock(t0).opts())
			// Deciding the descriptors of one request at once is what a
			// Redis-backed service does; force it on the memory store too.
			g := *s.gen.Load()
			g.concurrent = concurrent
			s.gen.Store(&g)
			exactUnderConcurrency(t, s)
		})
	}
}

func exactUnderConcurrency(t *testing.T, s *Service) {
	c0, conn := serveGRPC(t, s)
	clients := []rlspb.RateLimitServiceClient{c0}
	for range 7 {
		cc := dial(t, conn.Target())
		t.Cleanup(func() { _ = cc.Close() })
		clients = append(clients, rlspb.NewRateLimitServiceClient(cc))
	}
	const callers, each = 64, 10
	var mu sync.Mutex
	ok := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for range each {
				resp, err := c.ShouldRateLimit(context.Background(), request("d", desc("k", "one"), desc("s", "one")))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for j, st := range resp.Statuses {
					if st.Code == OK {
						ok[[]string{"fixed", "sliding"}[j]]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok["fixed"] != 300 || ok["sliding"] != 100 {
		t.Errorf("allowed %v of %d calls, want fixed 300 and sliding 100", ok, callers*each)
	}
}

func TestStoreFailureIsUnavailable(t *testing.T) {
	st := memorystore.New(memorystore.Options{SweepInterval: -1})
	s := mustNew(t, envoyConfig, st, newClock(t0).opts())
	c, _ := serveGRPC(t, s)
	_ = st.Close()
	_, err := c.ShouldRateLimit(context.Background(), request("edge", desc("remote_address", "1")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("closed store: err %v, want Unavailable", err)
	}
	// Descriptors that need no counter still get an answer.
	resp := call(t, c, request("edge", desc("remote_address", "10.0.0.1")))
	if resp.OverallCode != OK {
		t.Errorf("unlimited descriptor with a failed store: %s", resp.OverallCode)
	}
	var direct error
	_, direct = s.Decide(context.Background(), request("edge", desc("remote_address", "1")), t0)
	if errors.Is(direct, ErrInvalidRequest) || direct == nil {
		t.Errorf("Decide error %v: want a store error", direct)
	}
}

// TestHeadersDescribeLastOverLimit: with several descriptors over their
// limits the rate-limit headers describe the last one that is not a quota,
// as envoyproxy/ratelimit's do; within the limits, the first with the
// least remaining.
func TestHeadersDescribeLastOverLimit(t *testing.T) {
	svc := newService(t, `
response_headers: true
domains:
  - domain: t
    descriptors:
      - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}
      - {key: w, rate_limit: {unit: hour, requests_per_unit: 3}}
      - {key: q, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
`, Options{})
	c, _ := serveGRPC(t, svc)
	hdr := func(resp *rlspb.RateLimitResponse) string {
		var parts []string
		for _, h := range resp.ResponseHeadersToAdd {
			parts = append(parts, h.Key+": "+h.Value)
		}
		return strings.Join(parts, ", ")
	}
	req := request("t", desc("k", "a"), desc("w", "a"), desc("q", "a"))
	want := []string{
		"RateLimit-Limit: 1, RateLimit-Remaining: 0", // the quota's 0 is the least remaining
		"RateLimit-Limit: 1, RateLimit-Remaining: 0", // the quota over its limit: still the least remaining
		"RateLimit-Limit: 3, RateLimit-Remaining: 0", // w's last request: 0 too, and first
		"RateLimit-Limit: 3, RateLimit-Remaining: 0", // w over its limit, the quota ignored
		"RateLimit-Limit: 3, RateLimit-Remaining: 0",
		"RateLimit-Limit: 3, RateLimit-Remaining: 0", // k over too: w is the last
	}
	for i, w := range want {
		if got := hdr(call(t, c, req)); !strings.HasPrefix(got, w) {
			t.Errorf("call %d: %s, want %s...", i+1, got, w)
		}
	}
	// Two within their limits, equal remaining: the first.
	if got := hdr(call(t, c, request("t", desc("k", "b"), desc("w", "b")))); !strings.HasPrefix(got, "RateLimit-Limit: 3, RateLimit-Remaining: 2") {
		t.Errorf("within: %s", got)
	}
}

// TestReplacedUnlimited: an unlimited limit named in another's replaces
// keeps its remaining of 2^32-1, as in envoyproxy/ratelimit.
func TestReplacedUnlimited(t *testing.T) {
	svc := newService(t, `
domain: r
descriptors:
  - {key: u, rate_limit: {unlimited: true, name: un}}
  - {key: l, rate_limit: {unit: minute, requests_per_unit: 1, name: lim, replaces: [{name: un}]}}
`, Options{})
	c, _ := serveGRPC(t, svc)
	resp := call(t, c, request("r", desc("l", "a"), desc("u", "a")))
	if st := resp.Statuses[1]; st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 {
		t.Errorf("replaced unlimited: %v", st)
	}
}
