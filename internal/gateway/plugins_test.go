package gateway

import (
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

const authConfig = `
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: open
        paths: [/open]
      - name: locked
        paths: [/locked]
        plugins:
          - name: key-auth
            config: {key_names: [apikey, x-key], hide_credentials: true}
consumers:
  - username: alice
    custom_id: cust-1
    keyauth_credentials: [{key: alice-key}]
    groups: [{name: gold}]
  - username: bob
    keyauth_credentials: [{key: bob-key}]
consumer_groups:
  - name: gold
`

func TestKeyAuth(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(authConfig, up), Options{})

	if r := do(t, "GET", base+"/open", nil); r.status != 200 {
		t.Fatalf("open route: %d %s", r.status, r.body)
	}
	r := do(t, "GET", base+"/locked", nil)
	if r.status != 401 || !strings.HasPrefix(r.body, `{"message":"No API key found in request"`) {
		t.Errorf("no key: %d %s", r.status, r.body)
	}
	if got := r.header.Get("WWW-Authenticate"); got != `Key realm="kong"` {
		t.Errorf("WWW-Authenticate %q", got)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	if r.header.Get("X-Kong-Response-Latency") == "" || r.header.Get("X-Kong-Request-Id") == "" {
		t.Errorf("Kong headers of a plugin's answer: %v", r.header)
	}
	r = do(t, "GET", base+"/locked", map[string]string{"apikey": "nope"})
	if r.status != 401 || !strings.HasPrefix(r.body, `{"message":"Unauthorized"`) {
		t.Errorf("bad key: %d %s", r.status, r.body)
	}
	r = do(t, "GET", base+"/locked", map[string]string{"apikey": "alice-key"})
	if r.status != 200 {
		t.Fatalf("header key: %d %s", r.status, r.body)
	}
	e := r.echoed(t)
	if r.header.Get("X-Kong-Upstream-Latency") == "" || r.header.Get("X-Kong-Proxy-Latency") == "" {
		t.Errorf("Kong latency headers of a proxied answer: %v", r.header)
	}
	if _, ok := e.Headers["apikey"]; ok {
		t.Error("hide_credentials: the key header was forwarded")
	}
	if e.Headers["x-consumer-username"] != "alice" || e.Headers["x-consumer-custom-id"] != "cust-1" ||
		e.Headers["x-consumer-groups"] != "gold" || e.Headers["x-consumer-id"] == "" {
		t.Errorf("consumer headers: %v", e.Headers)
	}
	r = do(t, "GET", base+"/locked/x?x-key=bob-key&keep=1", nil)
	if r.status != 200 {
		t.Fatalf("query key: %d %s", r.status, r.body)
	}
	if e := r.echoed(t); e.Query != "keep=1" || e.Headers["x-consumer-username"] != "bob" {
		t.Errorf("query key: query %q, headers %v", e.Query, e.Headers)
	}
}

const rlaConfig = `
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: limited
        paths: [/limited]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [2], window_size: [60], window_type: fixed, namespace: t1}
      - name: basic
        paths: [/basic]
        plugins:
          - name: rate-limiting
            config: {minute: 1}
      - name: tiers
        paths: [/tiers]
        plugins:
          - name: key-auth
plugins:
  - name: rate-limiting-advanced
    route: tiers
    config: {limit: [1], window_size: [60], window_type: fixed, namespace: base, identifier: consumer}
  - name: rate-limiting-advanced
    consumer_group: gold
    config: {limit: [3], window_size: [60], window_type: fixed, namespace: gold, identifier: consumer}
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-key}]
    groups: [{name: gold}]
  - username: bob
    keyauth_credentials: [{key: bob-key}]
consumer_groups:
  - name: gold
`

func TestRateLimitingAdvancedHeadersAndBody(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(rlaConfig, up), Options{})
	for i := 1; i <= 2; i++ {
		r := do(t, "GET", base+"/limited", nil)
		if r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
		if got, want := r.header.Get("X-RateLimit-Remaining-Minute"), []string{"", "1", "0"}[i]; got != want {
			t.Errorf("request %d: X-RateLimit-Remaining-Minute %q, want %q", i, got, want)
		}
		if r.header.Get("X-RateLimit-Limit-Minute") != "2" || r.header.Get("RateLimit-Limit") != "2" {
			t.Errorf("request %d: headers %v", i, r.header)
		}
	}
	r := do(t, "GET", base+"/limited", nil)
	if r.status != 429 || r.body != `{"message":"API rate limit exceeded"}` {
		t.Errorf("over the limit: %d %s", r.status, r.body)
	}
	if r.header.Get("Retry-After") == "" || r.header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("429 headers: %v", r.header)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("429 content type %q", ct)
	}
}

func TestRateLimitingBasic(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(rlaConfig, up), Options{})
	r := do(t, "GET", base+"/basic", nil)
	if r.status != 200 || r.header.Get("X-RateLimit-Limit-Minute") != "1" || r.header.Get("X-RateLimit-Remaining-Minute") != "0" {
		t.Fatalf("first: %d %v", r.status, r.header)
	}
	r = do(t, "GET", base+"/basic", nil)
	if r.status != 429 || !strings.Contains(r.body, `"message":"API rate limit exceeded"`) {
		t.Errorf("second: %d %s", r.status, r.body)
	}
}

// TestConsumerGroupTiers checks Kong's precedence: a consumer-group plugin
// (rank 9) beats a route plugin (rank 10) for a member of the group, and
// the route plugin applies to everyone else.
func TestConsumerGroupTiers(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(rlaConfig, up), Options{})
	count := func(key string) int {
		n := 0
		for range 5 {
			r := do(t, "GET", base+"/tiers", map[string]string{"apikey": key})
			if r.status == 200 {
				n++
			} else if r.status != 429 {
				t.Fatalf("%s: %d %s", key, r.status, r.body)
			}
		}
		return n
	}
	if n := count("alice-key"); n != 3 {
		t.Errorf("gold member alice: %d allowed, want the gold tier's 3", n)
	}
	if n := count("bob-key"); n != 1 {
		t.Errorf("bob: %d allowed, want the route's 1", n)
	}
}

// TestLegacyGroupOverrides reads consumer_groups[].plugins as legacy
// overrides: the route's instance enforces them for members.
func TestLegacyGroupOverrides(t *testing.T) {
	up := echoUpstream(t)
	cfg := withUpstream(`
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: r
        paths: [/]
        plugins:
          - name: key-auth
          - name: rate-limiting-advanced
            config:
              limit: [1]
              window_size: [60]
              window_type: fixed
              identifier: consumer
              namespace: legacy
              enforce_consumer_groups: true
              consumer_groups: [gold]
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-key}]
    groups: [{name: gold}]
  - username: bob
    keyauth_credentials: [{key: bob-key}]
consumer_groups:
  - name: gold
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [3], window_size: [60], window_type: fixed}
`, up)
	_, base := startGateway(t, cfg, Options{GroupPolicyOverrides: true})
	if n := countAllowed(t, base, "/", map[string]string{"apikey": "alice-key"}, 5); n != 3 {
		t.Errorf("alice (gold override): %d allowed, want 3", n)
	}
	if n := countAllowed(t, base, "/", map[string]string{"apikey": "bob-key"}, 5); n != 1 {
		t.Errorf("bob: %d allowed, want 1", n)
	}
	// An override carries only the override fields.
	g, err := New(Options{GroupPolicyOverrides: true})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Validate([]byte(strings.Replace(cfg, "config: {limit: [3], window_size: [60], window_type: fixed}",
		"config: {limit: [3], window_size: [60], namespace: x}", 1)))
	if err == nil || !strings.Contains(err.Error(), "consumer_groups[0].plugins[0].config.namespace") {
		t.Errorf("override with a plugin-only field: %v", err)
	}
}

// TestPickScopeGroup: among group-scoped instances of one rank, the
// consumer's group that policy.SelectScopeGroup picks runs; a more
// specific instance wins over every group-scoped one.
func TestPickScopeGroup(t *testing.T) {
	gold := &kongconf.ConsumerGroup{Name: "gold"}
	silver := &kongconf.ConsumerGroup{Name: "silver"}
	bronze := &kongconf.ConsumerGroup{Name: "bronze"}
	both := &kongconf.Consumer{Username: "both", Groups: []*kongconf.ConsumerGroup{silver, gold}}
	silverOnly := &kongconf.Consumer{Username: "s", Groups: []*kongconf.ConsumerGroup{silver}}
	nobody := &kongconf.Consumer{Username: "n"}
	inst := func(p *kongconf.Plugin) *instance {
		r, _ := rank(p)
		return &instance{entity: p, rank: r}
	}
	pSilver := inst(&kongconf.Plugin{ConsumerGroup: silver})
	pGold := inst(&kongconf.Plugin{ConsumerGroup: gold})
	pBronze := inst(&kongconf.Plugin{ConsumerGroup: bronze})
	pGlobal := inst(&kongconf.Plugin{})
	pOwn := inst(&kongconf.Plugin{Consumer: both})
	list := []*instance{pSilver, pGold, pBronze, pGlobal}
	for _, tc := range []struct {
		list     []*instance
		consumer *kongconf.Consumer
		want     *instance
	}{
		{list, both, pGold},
		{list, silverOnly, pSilver},
		{list, nobody, pGlobal},
		{list, nil, pGlobal},
		{append([]*instance{pOwn}, list...), both, pOwn},
	} {
		if got := pick(tc.list, tc.consumer); got != tc.want {
			t.Errorf("%v: picked %+v, want %+v", tc.consumer, got.entity, tc.want.entity)
		}
	}
}

// TestEqualPriorityOrder: rate-limiting-advanced and rate-limiting share
// priority 910, and Kong runs equal priorities by name, descending. So
// rate-limiting-advanced runs first: a request it rejects never counts
// against rate-limiting, whose headers, set last, are the client's.
func TestEqualPriorityOrder(t *testing.T) {
	up := echoUpstream(t)
	_, base := startGateway(t, withUpstream(`
_format_version: "3.0"
services:
- name: s1
  url: UPSTREAM
  routes:
  - name: a
    paths: [/a]
    plugins:
    - name: rate-limiting-advanced
      config: {limit: [2], window_size: [60], identifier: ip, namespace: order-a, window_type: fixed}
  - name: b
    paths: [/b]
plugins:
- name: rate-limiting
  config: {minute: 3, limit_by: ip}
`, up), Options{})
	for i, c := range []struct {
		path, limit, remaining string
		status                 int
	}{
		{"/a", "3", "2", 200},
		{"/a", "3", "1", 200},
		{"/a", "2", "0", 429}, // rate-limiting-advanced's answer; rate-limiting never ran
		{"/a", "2", "0", 429},
		{"/b", "3", "0", 200}, // rate-limiting's third request
		{"/b", "3", "0", 429},
	} {
		r := do(t, "GET", base+c.path, nil)
		lim, rem := r.header.Get("X-RateLimit-Limit-Minute"), r.header.Get("X-RateLimit-Remaining-Minute")
		if r.status != c.status || lim != c.limit || rem != c.remaining {
			t.Errorf("request %d (%s): %d, limit %q, remaining %q; want %d, %q, %q",
				i+1, c.path, r.status, lim, rem, c.status, c.limit, c.remaining)
		}
	}
}
