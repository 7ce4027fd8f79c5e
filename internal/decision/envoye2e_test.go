package decision

import (
	"net/http"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// peerE2EConfig is the rate limit configuration envoyproxy/ratelimit's
// end-to-end scripts run against (its examples/ratelimit/config), the same
// descriptors written out here, with the second file of that directory.
var peerE2EConfig = []File{
	{Name: "config.yaml", Data: []byte(`
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: bkthomps}, {name: fake_name}]}
  - key: source_cluster
    value: proxy
    descriptors:
      - {key: destination_cluster, value: bkthomps, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: bkthomps}]}}
      - {key: destination_cluster, value: mock, rate_limit: {unit: minute, requests_per_unit: 1}}
      - {key: destination_cluster, value: override, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: banned_limit}]}}
      - {key: destination_cluster, value: fake, rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - {key: bar, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bar, value: bkthomps, rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}}
      - {key: bar, value: banned, rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}}
      - {key: baz, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: baz, value: not-so-shady, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: baz, value: shady, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bay, rate_limit: {unlimited: true}}
  - {key: unspec, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: qux, rate_limit: {unlimited: true}}
`)},
	{Name: "example.yaml", Data: []byte(`
domain: mongo_cps
descriptors:
  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}
  - {key: database, value: default, rate_limit: {unit: second, requests_per_unit: 500}}
`)},
}

func hdr(key string) envoyAction {
	return envoyAction{requestHeader: &headerAction{header: key, key: key}}
}

func headers(name ...string) envoyRateLimit {
	var rl envoyRateLimit
	for _, n := range name {
		rl.actions = append(rl.actions, hdr(n))
	}
	return rl
}

// peerE2ERoutes are the routes of the Envoy configuration the scripts run
// through (its examples/envoy/proxy.yaml): domain rl, Envoy started with
// --service-cluster proxy, every route to the cluster mock.
var peerE2ERoutes = map[string]envoyRoute{
	"/test":       {cluster: "mock", limits: []envoyRateLimit{{actions: []envoyAction{{sourceCluster: true}, {destinationCluster: true}}}}},
	"/header":     {cluster: "mock", limits: []envoyRateLimit{headers("foo")}},
	"/twoheader":  {cluster: "mock", limits: []envoyRateLimit{headers("foo", "bar"), headers("foo", "baz")}},
	"/fourheader": {cluster: "mock", limits: []envoyRateLimit{headers("foo", "bar"), headers("source_cluster", "destination_cluster")}},
	"/fiveheader": {cluster: "mock", limits: []envoyRateLimit{headers("foo", "bar"), headers("source_cluster", "destination_cluster"), headers("category")}},
	"/unspec":     {cluster: "mock", limits: []envoyRateLimit{headers("unspec")}},
}

// scriptStep is one curl of a script: the headers sent and the status the
// client must see.
type scriptStep struct {
	path string
	kv   []string // header name, value, ...
	want int
}

const (
	pass    = http.StatusOK
	limited = http.StatusTooManyRequests
)

func (p *envoyProxy) runScript(t *testing.T, name string, steps []scriptStep) {
	t.Helper()
	for i, s := range steps {
		h := map[string]string{}
		for j := 0; j+1 < len(s.kv); j += 2 {
			h[s.kv[j]] = s.kv[j+1]
		}
		if got, _ := p.do(t, clientRequest{path: s.path, headers: h, remoteAddr: "192.0.2.1"}); got != s.want {
			t.Errorf("%s: curl %d (%s %v): %d, want %d", name, i+1, s.path, s.kv, got, s.want)
		}
	}
}

// envoyproxy/ratelimit's end-to-end scripts (integration-test/scripts), in
// the order its run-all.sh runs them against one service: each curl
// becomes the RateLimitRequest Envoy sends for it, and the client's
// status is what Envoy answers (429 for OVER_LIMIT). On both stores, over
// gRPC and /json, with the peer's statistics sent to a real UDP socket.
func TestPeerEndToEndScripts(t *testing.T) {
	eachBackend(t, peerE2EConfig, Options{PeerStats: true}, func(t *testing.T, b backend) {
		p := &envoyProxy{domain: "rl", serviceCluster: "proxy", routes: peerE2ERoutes, rls: b.c}
		two, four, five := "/twoheader", "/fourheader", "/fiveheader"
		banned := []string{"foo", "bkthomps", "bar", "banned"}
		override := append(banned, "source_cluster", "proxy", "destination_cluster", "override")
		mine := func(dst string) []string {
			return []string{"foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", dst}
		}
		account := append(mine("fake"), "category", "account")
		foo3 := []string{"foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"}
		p.runScript(t, "replaces.sh", []scriptStep{
			// (foo, bar: banned) is banned_limit, 0 per minute...
			{two, banned, limited},
			{four, append(banned, "source_cluster", "proxy", "destination_cluster", "mock"), limited},
			// ...which (source_cluster: proxy, destination_cluster: override) replaces with 2.
			{four, override, pass}, {four, override, pass}, {four, override, limited},
			// bkthomps (1) replaced by destination_cluster bkthomps (2), but
			// not where that descriptor is absent.
			{four, mine("bkthomps"), pass}, {four, mine("bkthomps"), pass}, {four, mine("bkthomps"), limited},
			{four, mine("not_bkthomps"), pass}, {four, mine("not_bkthomps"), limited},
			{four, mine("bkthomps"), limited},
			// category account (4) replaces both bkthomps and fake_name.
			{five, account, pass}, {five, account, pass}, {five, account, pass}, {five, account, pass},
			{five, account, limited},
			{two, []string{"foo", "foo_2", "bar", "bkthomps"}, pass},
			{two, []string{"foo", "foo_2", "bar", "bkthomps"}, limited},
			{four, foo3, pass}, {four, foo3, pass}, {four, foo3, limited},
			{five, account, limited},
		})
		p.runScript(t, "simple-get.sh", []scriptStep{{two, []string{"foo", "test", "baz", "shady"}, pass}})
		notSoShady := []string{"foo", "pelle", "baz", "not-so-shady"}
		p.runScript(t, "trigger-ratelimit.sh", []scriptStep{
			{two, notSoShady, pass}, {two, notSoShady, pass}, {two, notSoShady, pass},
			{two, notSoShady, limited}, {two, notSoShady, limited},
		})
		shady := []string{"foo", "pelle", "baz", "shady"}
		p.runScript(t, "trigger-shadow-mode-key.sh", []scriptStep{
			{two, shady, pass}, {two, shady, pass}, {two, shady, pass}, {two, shady, pass}, {two, shady, pass},
		})
		// The script then reads x-ratelimit-remaining, which Envoy takes
		// from the descriptor's limit_remaining: a shadow-mode descriptor
		// past its limit answers OK with 0 remaining, as the peer does.
		if code, resp := p.do(t, clientRequest{path: two, headers: map[string]string{"foo": "pelle", "baz": "shady"}}); code != pass ||
			len(resp.Statuses) != 1 || resp.Statuses[0].Code != rlspb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
			t.Errorf("shadow mode past the limit: %d %v", code, resp)
		}
		unspec := []string{"unspec", "unspecified_value"}
		p.runScript(t, "value-included-in-stats-key-when-unspecified.sh", []scriptStep{
			{"/unspec", unspec, pass}, {"/unspec", unspec, pass}, {"/unspec", unspec, limited},
		})
		// The script then reads the statistic: detailed_metric names it by
		// the request's value.
		l := listenUDP(t)
		sink, err := b.s.StartStatsd(StatsdOptions{Addr: l.conn.LocalAddr().String(), Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil { // Close flushes
			t.Fatal(err)
		}
		l.collect(t,
			"ratelimit.service.rate_limit.rl.unspec_unspecified_value.over_limit:1|c",
			"ratelimit.service.rate_limit.rl.unspec_unspecified_value.total_hits:3|c",
			"ratelimit.service.rate_limit.rl.foo.baz_shady.shadow_mode:3|c",
		)
	})
}

func u64(n uint64) *uint64 { return &n }

// The other actions of Envoy's rate_limits, sent as Envoy sends them:
// remote_address, generic_key, header_value_match (matching and not), and
// a check-only entry (hits_addend 0) on the request path beside an
// apply_on_stream_done entry that counts the request's cost when it ends.
func TestEnvoyActions(t *testing.T) {
	const cfg = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: generic_key
    value: api
    rate_limit: {unit: minute, requests_per_unit: 4}
    descriptors:
      - {key: header_match, value: write, rate_limit: {unit: minute, requests_per_unit: 1}}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	routes := map[string]envoyRoute{
		"/ip": {cluster: "app", limits: []envoyRateLimit{{actions: []envoyAction{{remoteAddress: true}}}}},
		"/api": {cluster: "app", limits: []envoyRateLimit{
			{actions: []envoyAction{{genericKey: &genericKeyAction{value: "api"}}}},
			{actions: []envoyAction{{genericKey: &genericKeyAction{value: "api"}},
				{headerValueMatch: &headerMatchAction{value: "write", header: ":method", exact: "POST", expectMatch: true}}}},
		}},
		// Check before the call, count its cost (4 units) when it ends.
		"/llm": {cluster: "app", limits: []envoyRateLimit{
			{actions: []envoyAction{{requestHeader: &headerAction{header: "x-user", key: "user"}}}, hitsAddend: u64(0)},
			{actions: []envoyAction{{requestHeader: &headerAction{header: "x-user", key: "user"}}}, hitsAddend: u64(4), applyOnStreamDone: true},
		}},
	}
	for _, countDenied := range []bool{false, true} {
		name := "all-or-nothing"
		if countDenied {
			name = "count-denied"
		}
		t.Run(name, func(t *testing.T) {
			eachBackendYAML(t, cfg, Options{CountDenied: countDenied}, func(t *testing.T, b backend) {
				p := &envoyProxy{domain: "edge", serviceCluster: "front", routes: routes, rls: b.c}
				from := func(addr string, want int) scriptStep { return scriptStep{"/ip", []string{"remote", addr}, want} }
				for i, s := range []scriptStep{from("192.0.2.1", pass), from("192.0.2.1", pass), from("192.0.2.1", pass),
					from("192.0.2.1", limited), from("192.0.2.2", pass)} {
					if got, _ := p.do(t, clientRequest{path: s.path, remoteAddr: s.kv[1]}); got != s.want {
						t.Errorf("remote_address %d (%s): %d, want %d", i+1, s.kv[1], got, s.want)
					}
				}
				get, post := []string{":method", "GET"}, []string{":method", "POST"}
				p.runScript(t, "generic_key and header_value_match", []scriptStep{
					{"/api", post, pass},    // api 1, write 1
					{"/api", post, limited}, // write over; api is counted on its own (2)
					{"/api", get, pass},     // api 3: header_value_match drops the second descriptor
					{"/api", get, pass},     // api 4
					{"/api", get, limited},
				})
				alice := []string{"x-user", "alice"}
				steps := []scriptStep{
					{"/llm", alice, pass}, // checked at 0, then 4 counted
					{"/llm", alice, pass}, // at 4, then 8
					{"/llm", alice, pass}, // at 8: one more fits; the cost of 4 does not
				}
				if countDenied {
					// As envoyproxy/ratelimit: the 4 are counted anyway
					// (12), and the next check is over.
					steps = append(steps, scriptStep{"/llm", alice, limited})
				} else {
					// All or nothing: the denied 4 are not counted, so the
					// count stays at 8 and checks pass.
					steps = append(steps, scriptStep{"/llm", alice, pass})
				}
				p.runScript(t, "hits_addend 0 and apply_on_stream_done", steps)
				_, resp := p.do(t, clientRequest{path: "/llm", headers: map[string]string{"x-user": "bob"}})
				if len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != 10 {
					t.Errorf("a check-only call counts: %v", resp)
				}
			})
		})
	}
}
