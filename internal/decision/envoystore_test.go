package decision

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-008287da/sluice/internal/testservers"
)

func envoyLayoutConfig(r *testservers.RedisServer, prefix string) string {
	return fmt.Sprintf(`
store:
  type: redis
  redis: {host: %s, port: %d, key_layout: envoy, key_prefix: %q}
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: files
    value: "f/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`, r.Host(), r.Port(), prefix)
}

// Counter continuity: keys envoyproxy/ratelimit wrote in its layout
// (<prefix><domain>_<key>_<value>_<window start>) are continued by sluice,
// and sluice's hits land where envoyproxy/ratelimit reads them, with its
// expiry and its accounting (a denied hit is counted too).
func TestEnvoyKeyLayoutContinuesPeerCounters(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	minute := strconv.FormatInt(t0.Unix()/60*60, 10)
	hour := strconv.FormatInt(t0.Unix()/3600*3600, 10)
	// What envoyproxy/ratelimit left: two hits of (k, v) this minute.
	r.Do(t, "SET", "pre_d_k_v_"+minute, "2")
	s, err := Open(mustParse(t, envoyLayoutConfig(r, "pre_")), newClock(t0).opts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "v"))
	runSteps(t, c, []step{
		{"third hit", k, OK, codes_(OK), []uint32{0}, []uint32{3}},
		{"fourth: over", k, OVER, codes_(OVER), []uint32{0}, nil},
	})
	if got := fmt.Sprint(r.Do(t, "GET", "pre_d_k_v_"+minute)); got != "4" {
		t.Errorf("counter after sluice's two calls = %s, want 4 (the peer counts denied hits)", got)
	}
	if ttl, _ := strconv.Atoi(fmt.Sprint(r.Do(t, "TTL", "pre_d_k_v_"+minute))); ttl <= 0 || ttl > 60 {
		t.Errorf("TTL %d, want one window", ttl)
	}
	// share_threshold counts under the pattern, as the peer keys it.
	call(t, c, request("d", desc("files", "f/a")))
	call(t, c, request("d", desc("files", "f/b")))
	if got := fmt.Sprint(r.Do(t, "GET", "pre_d_files_f/*_"+hour)); got != "2" {
		t.Errorf("shared counter = %s, want 2", got)
	}
	// A check (hits_addend 0) reads without writing.
	r.Do(t, "SET", "pre_d_k_w_"+minute, "1")
	chk := desc("k", "w")
	chk.HitsAddend = wrapperspb.UInt64(0)
	runSteps(t, c, []step{{"check", request("d", chk), OK, codes_(OK), []uint32{2}, nil}})
	if got := fmt.Sprint(r.Do(t, "GET", "pre_d_k_w_"+minute)); got != "1" {
		t.Errorf("a check wrote: %s", got)
	}
}

func TestEnvoyKeyLayoutLimits(t *testing.T) {
	for _, tc := range []struct{ limit, want string }{
		{"{unit: minute, requests_per_unit: 3, algorithm: sliding}", "key_layout envoy holds fixed windows of one unit only"},
		{"{unit: minute, unit_multiplier: 5, requests_per_unit: 3}", "key_layout envoy holds fixed windows of one unit only"},
		{"{limits: [{unit: second, requests_per_unit: 1}, {unit: hour, requests_per_unit: 9}]}", "key_layout envoy holds one limit per descriptor"},
	} {
		yml := "store: {type: redis, redis: {key_layout: envoy}}\ndomain: d\ndescriptors: [{key: k, rate_limit: " + tc.limit + "}]\n"
		_, err := Parse([]byte(yml))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.limit, err)
		}
	}
	if _, err := Parse([]byte("store: {type: redis, redis: {key_prefix: x}}\ndomain: d\ndescriptors: [{key: k}]\n")); err == nil || !strings.Contains(err.Error(), "key_prefix: only with key_layout envoy") {
		t.Errorf("key_prefix without the layout: %v", err)
	}
}

// key_layout envoy connects as the other layouts do: a Redis that refuses
// connections at start is no error, the service decides with local
// counters from its first call, and once Redis answers (the first call
// after the cool-down) it counts in envoyproxy/ratelimit's keys again.
func TestEnvoyKeyLayoutRedisDownAtStart(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	r.Stop()
	clk := newClock(t0)
	s, err := Open(mustParse(t, envoyLayoutConfig(r, "pre_")), clk.opts())
	if err != nil {
		t.Fatalf("Open with redis down: %v", err)
	}
	defer s.Close()
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "v"))
	runSteps(t, c, []step{
		{"1 (local)", k, OK, codes_(OK), []uint32{2}, nil},
		{"2 (local)", k, OK, codes_(OK), []uint32{1}, nil},
		{"3 (local)", k, OK, codes_(OK), []uint32{0}, nil},
		{"4 (local): over", k, OVER, codes_(OVER), []uint32{0}, nil},
	})
	if v := testutil.ToFloat64(s.m.redisFallback.WithLabelValues("decision")); v != 1 {
		t.Errorf("sluice_redis_fallback with redis down = %v, want 1", v)
	}

	r.Restart(t)
	clk.add(2 * time.Second) // past the cool-down
	now := t0.Add(2 * time.Second)
	minute := strconv.FormatInt(now.Unix()/60*60, 10)
	runSteps(t, c, []step{{"5 (redis back)", k, OK, codes_(OK), []uint32{2}, nil}})
	if got := fmt.Sprint(r.Do(t, "GET", "pre_d_k_v_"+minute)); got != "1" {
		t.Errorf("counter in the peer's key once redis answers = %s, want 1", got)
	}
	if v := testutil.ToFloat64(s.m.redisFallback.WithLabelValues("decision")); v != 0 {
		t.Errorf("sluice_redis_fallback with redis back = %v, want 0", v)
	}
	// The counters calls read and reset the peer's key.
	cnt, found, err := s.Counter(context.Background(), "d", []DescriptorEntry{{Key: "k", Value: "v"}}, now)
	if err != nil || !found || cnt.Windows[0].Current != 1 {
		t.Errorf("Counter = %+v, %v, %v; want the peer's key's count 1", cnt, found, err)
	}
	if held, err := s.Reset(context.Background(), "d", []DescriptorEntry{{Key: "k", Value: "v"}}, now); err != nil || !held {
		t.Fatalf("Reset = %v, %v; want the peer's key held", held, err)
	}
	if n, _ := r.Do(t, "EXISTS", "pre_d_k_v_"+minute).(int64); n != 0 {
		t.Errorf("the peer's key is still there after Reset")
	}
}
