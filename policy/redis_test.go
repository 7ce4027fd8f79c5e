package policy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// Tests decide with the caller's clock and give Redis calls time on a
// loaded machine: a call that times out is decided locally, which these
// tests (except the fallback ones) must not see.
const testRedisTimeout = 10 * time.Second

var testRedisOpts = RegistryOptions{RedisCallerClock: true, RedisTimeout: testRedisTimeout}

func redisConfigJSON(srv *testservers.RedisServer) string {
	return `"redis":{"host":"127.0.0.1","port":` + strconv.Itoa(srv.Port()) + `}`
}

// basicRedisJSON is redisConfigJSON for rate-limiting, whose calls wait as
// long as its record's timeout says: testRedisTimeout.
func basicRedisJSON(srv *testservers.RedisServer) string {
	return `"redis":{"host":"127.0.0.1","port":` + strconv.Itoa(srv.Port()) + `,"timeout":` +
		strconv.FormatInt(testRedisTimeout.Milliseconds(), 10) + `}`
}

// Two nodes (registries) on one real Redis share a namespace's counters in
// synchronous mode, and two namespaces on one Redis share one client.
func TestRedisStrategySharedAcrossNodes(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"limit":[3],"window_size":[60],"window_type":"fixed","namespace":"orders","identifier":"ip","strategy":"redis","sync_rate":0,` + redisConfigJSON(srv) + `}`
	nodeA := newRegistry(t, testRedisOpts)
	nodeB := newRegistry(t, testRedisOpts)
	a := newAdvanced(t, nodeA, cfg)
	b := newAdvanced(t, nodeB, cfg)
	runCalls(t, a, []call{{t: time.Second, repeat: 2, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "0"}}})
	runCalls(t, b, []call{{t: 2 * time.Second, allowed: false, headers: want{"Retry-After": "58"}}})

	other := newAdvanced(t, nodeA, `{"limit":[3],"window_size":[60],"namespace":"other","strategy":"redis","sync_rate":0,`+redisConfigJSON(srv)+`}`)
	runCalls(t, other, []call{{t: 2 * time.Second, allowed: true}})
	nodeA.mu.Lock()
	clients := len(nodeA.clients)
	nodeA.mu.Unlock()
	if clients != 1 {
		t.Errorf("%d redis clients for two namespaces on one redis, want 1", clients)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	nodeA.mu.Lock()
	clients = len(nodeA.clients)
	nodeA.mu.Unlock()
	if clients != 0 {
		t.Errorf("%d redis clients after every store closed, want 0", clients)
	}
}

// Redis unreachable: requests are still decided, with local counters and
// headers, never failed.
func TestRedisDownFallsBackToLocal(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	a := newAdvanced(t, newRegistry(t, testRedisOpts),
		`{"limit":[2],"window_size":[60],"window_type":"fixed","namespace":"n","identifier":"ip","strategy":"redis","sync_rate":0,`+redisConfigJSON(srv)+`}`)
	runCalls(t, a, []call{{t: time.Second, allowed: true}})
	srv.Stop()
	for i, wantAllowed := range []bool{true, true, false} {
		r := Request{ClientIP: "10.0.0.9", Now: at(2 * time.Second)}
		res, err := a.Check(context.Background(), &r)
		if err != nil {
			t.Fatalf("call %d with redis down: %v", i, err)
		}
		if res.Allowed != wantAllowed || len(res.Headers) == 0 {
			t.Fatalf("call %d with redis down: %+v, want allowed %v with headers", i, res, wantAllowed)
		}
	}
}

// The OSS plugin on real Redis: sync_rate -1 is synchronous, so two nodes
// share counts, and rejected requests are counted (Kong increments first).
func TestBasicRedisPolicy(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"minute":2,"policy":"redis","limit_by":"ip",` + basicRedisJSON(srv) + `}`
	a := newBasic(t, newRegistry(t, testRedisOpts), cfg, Scope{})
	b := newBasic(t, newRegistry(t, testRedisOpts), cfg, Scope{})
	runCalls(t, a, []call{{t: time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "1"}}})
	runCalls(t, b, []call{
		{t: 2 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "0"}},
		{t: 3 * time.Second, allowed: false},
	})
	runCalls(t, a, []call{{t: 61 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "1"}}})
}

// rate-limiting's keys live as Kong's do, about as long as their window
// (until the end of the next one), not the hour a store on the caller's
// clock keeps them.
func TestBasicRedisKeyTTL(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"minute":2,"policy":"redis","limit_by":"ip",` + basicRedisJSON(srv) + `}`
	b := newBasic(t, newRegistry(t, RegistryOptions{RedisTimeout: testRedisTimeout}), cfg, Scope{})
	runCalls(t, b, []call{{t: time.Second, allowed: true}})
	keys, _ := srv.Do(t, "KEYS", "*").([]any)
	if len(keys) == 0 {
		t.Fatal("no key in Redis")
	}
	for _, k := range keys {
		ttl, _ := srv.Do(t, "PTTL", k.(string)).(int64)
		if ttl <= 0 || ttl > int64(2*time.Minute/time.Millisecond) {
			t.Errorf("key %s: PTTL %d ms, want at most two minutes", k, ttl)
		}
	}
}

// ssl, ssl_verify and server_name reach the Redis client; the CA comes
// from RegistryOptions.RedisTLS. A wrong server name fails verification.
func TestRedisTLS(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{TLS: true})
	reg := newRegistry(t, RegistryOptions{RedisCallerClock: true, RedisTimeout: testRedisTimeout, RedisTLS: srv.TLSConfig()})
	tlsCfg := func(name string) string {
		return `{"limit":[1],"window_size":[60],"namespace":"tls-` + name + `","strategy":"redis","sync_rate":0,` +
			`"redis":{"host":"127.0.0.1","port":` + strconv.Itoa(srv.Port()) + `,"ssl":true,"ssl_verify":true,"server_name":"` + name + `"}}`
	}
	a := newAdvanced(t, reg, tlsCfg("localhost"))
	runCalls(t, a, []call{{t: 0, allowed: true}, {t: time.Second, allowed: false}})

	if st, ok := a.store.(*redisstore.Store); !ok || st.Stats().State != redisstore.StateConnected {
		t.Errorf("store %T, want a connected redis store", a.store)
	}
	// The wrong name fails verification: the namespace counts locally.
	b := newAdvanced(t, reg, tlsCfg("not-the-server"))
	runCalls(t, b, []call{{t: 0, allowed: true}, {t: time.Second / 2, allowed: false}})
	if st, ok := b.store.(*redisstore.Store); !ok || st.Stats().State == redisstore.StateConnected || st.Stats().LocalDecisions != 2 {
		t.Errorf("store %T with a wrong server name, want one counting locally", b.store)
	}
}

// A Redis that does not answer when the config is compiled: the namespace
// counts locally from its first call, then moves to Redis once it answers
// (a fresh Redis: the local count is not carried over, as in Kong).
func TestRedisUnreachableAtStart(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Stop()
	reg := newRegistry(t, testRedisOpts)
	a := newAdvanced(t, reg, `{"limit":[100],"window_size":[3600],"window_type":"fixed","namespace":"late","identifier":"ip","strategy":"redis","sync_rate":0,`+redisConfigJSON(srv)+`}`)
	runCalls(t, a, []call{{t: 0, allowed: true, headers: want{"X-RateLimit-Remaining-hour": "99"}}})

	// The breaker's cool-down (1 s on the decisions' clock) has passed at
	// the next call: it connects.
	srv.Restart(t)
	runCalls(t, a, []call{{t: time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-hour": "99"}}})
	if n, ok := srv.Do(t, "DBSIZE").(int64); !ok || n == 0 {
		t.Errorf("redis holds %v keys after a decision, want some", srv.Do(t, "DBSIZE"))
	}
}

// The waiting room is kept in Redis: a request waiting on one node fills
// the room for the other, and abandoning the wait frees the slot.
func TestRedisWaitingRoomAcrossNodes(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"limit":[1],"window_size":[3600],"window_type":"fixed","namespace":"room","identifier":"ip","strategy":"redis","sync_rate":0,` +
		`"throttling":{"enabled":true,"interval":1000,"retry_times":1,"queue_limit":1},` + redisConfigJSON(srv) + `}`
	a := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	b := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	runCalls(t, a, []call{{t: 0, allowed: true}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		r := Request{ClientIP: "10.0.0.1", Now: at(time.Second)}
		_, err := a.Check(ctx, &r)
		done <- err
	}()
	leases := func() int64 {
		keys, _ := srv.Do(t, "KEYS", "*:lease").([]any)
		var n int64
		for _, k := range keys {
			if s, ok := k.(string); ok {
				c, _ := srv.Do(t, "ZCARD", s).(int64)
				n += c
			}
		}
		return n
	}
	// Wait (bounded) until node A's request holds the room in Redis.
	for deadline := time.Now().Add(10 * time.Second); leases() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the waiting request never entered the room")
		}
	}
	r := Request{ClientIP: "10.0.0.1", Now: at(2 * time.Second)}
	res, err := b.Check(context.Background(), &r)
	if err != nil || res.Allowed || res.Retries != 0 || res.Status != 429 {
		t.Fatalf("node B with the room full: %+v, %v; want an immediate 429", res, err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("abandoned wait returned no error")
	}
	if n := leases(); n != 0 {
		t.Errorf("%d leases after the wait was abandoned, want 0", n)
	}
}

// redisStateEvent is one OnRedisState call.
type redisStateEvent struct {
	namespace string
	degraded  bool
	err       error
}

// redisStateRecorder returns registry options whose OnRedisState sends
// every call on the returned channel.
func redisStateRecorder() (RegistryOptions, chan redisStateEvent) {
	ch := make(chan redisStateEvent, 64)
	opts := testRedisOpts
	opts.RedisTimeout = time.Second
	opts.OnRedisState = func(ns string, degraded bool, err error) { ch <- redisStateEvent{ns, degraded, err} }
	return opts, ch
}

// nextRedisState returns the next OnRedisState call, running step (a
// decision) until one arrives or the bounded deadline passes.
func nextRedisState(t *testing.T, ch chan redisStateEvent, step func()) redisStateEvent {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-ch:
			return ev
		case <-deadline:
			t.Fatal("no OnRedisState call before the deadline")
		default:
			step()
		}
	}
}

// OnRedisState reports a Redis that stops answering once (degraded, with
// the cause) and its return once, not every decision or probe in between.
func TestOnRedisStateAcrossRestart(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	opts, ch := redisStateRecorder()
	a := newAdvanced(t, newRegistry(t, opts),
		`{"limit":[1000000],"window_size":[60],"namespace":"hooked","identifier":"ip","strategy":"redis","sync_rate":0,`+redisConfigJSON(srv)+`}`)
	// The breaker's cool-down runs on the decisions' clock: each decision
	// is 100 ms after the previous one.
	now := at(time.Second)
	decide := func() {
		now = now.Add(100 * time.Millisecond)
		r := Request{ClientIP: "10.0.0.1", Now: now}
		if _, err := a.Check(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	decide()
	select {
	case ev := <-ch:
		t.Fatalf("state change %+v while redis answers", ev)
	default:
	}
	srv.Stop()
	if ev := nextRedisState(t, ch, decide); ev.namespace != "hooked" || !ev.degraded || ev.err == nil {
		t.Fatalf("after redis stopped: %+v, want hooked degraded with an error", ev)
	}
	srv.Restart(t)
	if ev := nextRedisState(t, ch, decide); ev.namespace != "hooked" || ev.degraded || ev.err != nil {
		t.Fatalf("after redis restarted: %+v, want hooked not degraded", ev)
	}
	decide()
	select {
	case ev := <-ch:
		t.Fatalf("extra state change %+v once redis answers", ev)
	default:
	}
}

// A Redis unreachable when the config is compiled: compiling reports
// nothing (the store connects on its first call), the first call reports
// the namespace degraded, and the first call after Redis answers reports
// it not degraded.
func TestOnRedisStateUnreachableAtCompile(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Stop()
	opts, ch := redisStateRecorder()
	a := newAdvanced(t, newRegistry(t, opts),
		`{"limit":[10],"window_size":[60],"namespace":"late","identifier":"ip","strategy":"redis","sync_rate":0,`+redisConfigJSON(srv)+`}`)
	select {
	case ev := <-ch:
		t.Fatalf("at compile: %+v, want nothing before the first call", ev)
	default:
	}
	runCalls(t, a, []call{{t: 0, allowed: true}})
	select {
	case ev := <-ch:
		if ev.namespace != "late" || !ev.degraded || ev.err == nil {
			t.Fatalf("at the first call: %+v, want late degraded with an error", ev)
		}
	default:
		t.Fatal("no OnRedisState call for a redis unreachable at the first call")
	}
	srv.Restart(t)
	runCalls(t, a, []call{{t: time.Second, allowed: true}})
	select {
	case ev := <-ch:
		if ev.namespace != "late" || ev.degraded {
			t.Fatalf("once redis answers: %+v, want late not degraded", ev)
		}
	default:
		t.Fatal("no OnRedisState call once redis answers")
	}
}

// With sync_rate > 0 the Redis store syncs every counter it holds, so a
// quota's windows, which are not among the plugin's, are shared across
// nodes like the plugin's own: node B sees node A's hits under a quota
// window of an hour on a plugin of one minute.
func TestRedisPeriodicSyncCarriesQuotaWindows(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"limit":[5],"window_size":[60],"window_type":"fixed","namespace":"quota-sync","identifier":"ip","strategy":"redis","sync_rate":0.05,` + redisConfigJSON(srv) + `}`
	a := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	b := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	q := Quota{Limits: []ratelimit.Limit{{Count: 1000, Window: time.Hour}}}
	check := func(l *Advanced) Result {
		t.Helper()
		r := Request{ClientIP: "10.0.0.1", Now: at(time.Second), Quota: q}
		res, err := l.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Window != time.Hour || res.Limit != 1000 {
			t.Fatalf("reported window %s limit %d, want the quota's hour and 1000", res.Window, res.Limit)
		}
		return res
	}
	for range 100 {
		check(a)
	}
	// Each of B's checks is a hit too: B has seen A's hits once its
	// remaining count is 100 below its own.
	deadline := time.Now().Add(15 * time.Second)
	for n := int64(1); ; n++ {
		res := check(b)
		if res.Remaining <= 1000-n-100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node B still shows %d remaining of the quota after %d own hits: node A's 100 never synced", res.Remaining, n)
		}
		<-time.After(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// A reload that fixes a namespace's Redis address: the old store, still
// counting locally, keeps the namespace degraded until it closes; the new
// one answers, so closing the old reports the namespace healthy.
func TestOnRedisStateReloadFixesAddress(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	gone := testservers.Redis(t, testservers.RedisOptions{})
	gone.Stop()
	opts, ch := redisStateRecorder()
	reg := newRegistry(t, opts)
	cfg := func(s *testservers.RedisServer) string {
		return `{"limit":[10],"window_size":[60],"namespace":"moved","identifier":"ip","strategy":"redis","sync_rate":0,` + redisConfigJSON(s) + `}`
	}
	old := newAdvanced(t, reg, cfg(gone))
	runCalls(t, old, []call{{t: 0, allowed: true}})
	if ev := <-ch; ev.namespace != "moved" || !ev.degraded {
		t.Fatalf("wrong address: %+v, want moved degraded", ev)
	}
	fixed := newAdvanced(t, reg, cfg(srv))
	runCalls(t, fixed, []call{{t: 0, allowed: true}})
	select {
	case ev := <-ch:
		t.Fatalf("state change %+v while the old store still counts locally", ev)
	default:
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.namespace != "moved" || ev.degraded {
			t.Fatalf("after the old store closed: %+v, want moved not degraded", ev)
		}
	default:
		t.Fatal("no state change when the last degraded store closed")
	}
}

// With the "kong" Redis layout, counters sit where Kong nodes keep them:
// one hash per window, "<window_start>:<W>:<namespace>", the
// identifier as the field. Two sluice nodes share them like Kong nodes do.
func TestRedisKongLayout(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	cfg := `{"limit":[3],"window_size":[60],"window_type":"fixed","namespace":"kong-ns","identifier":"ip","strategy":"redis","sync_rate":0,` +
		`"sluice":{"redis_layout":"kong"},` + redisConfigJSON(srv) + `}`
	a := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	b := newAdvanced(t, newRegistry(t, testRedisOpts), cfg)
	runCalls(t, a, []call{{t: time.Second, repeat: 1, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "1"}}})
	runCalls(t, b, []call{{t: time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "0"}}})
	runCalls(t, a, []call{{t: time.Second, allowed: false}})

	// Kong's nodes read the window's hash with HGET; so does this test. The
	// window starts at t0 (the decisions' clock); a fixed window keeps the
	// denied call counted, as Kong does.
	hash := strconv.FormatInt(t0.Unix(), 10) + ":60:kong-ns"
	if got := stringOf(srv.Do(t, "HGET", hash, "10.0.0.1")); got != "4" {
		t.Fatalf("HGET %s 10.0.0.1 = %q, want 4", hash, got)
	}

	if _, err := ParseAdvanced([]byte(`{"limit":[3],"window_size":[60],"sluice":{"redis_layout":"hash"}}`)); err == nil ||
		!strings.Contains(err.Error(), "config.sluice.redis_layout") {
		t.Fatalf("bad redis_layout: %v, want an error naming config.sluice.redis_layout", err)
	}
}

func stringOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// rate-limiting's fault_tolerant with Redis down, as in Kong: false fails
// the request (500, Kong's message); true lets it through. sluice then
// still limits it with this node's counters, where Kong limits nothing
// (docs/kong-compatibility.md).
func TestBasicRedisDownFaultTolerance(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	reg := newRegistry(t, testRedisOpts)
	strict := newBasic(t, reg, `{"minute":2,"policy":"redis","fault_tolerant":false,`+basicRedisJSON(srv)+`}`, Scope{})
	tolerant := newBasic(t, reg, `{"minute":2,"policy":"redis","fault_tolerant":true,`+basicRedisJSON(srv)+`}`, Scope{RouteID: "r2"})
	// With a positive sync_rate decisions are local, but a client met for
	// the first time is read from Redis, as Kong's usage() reads it. (With
	// the 10 s timeout, that read through the client connected when Redis
	// stopped took the whole timeout: a short one keeps the test short.)
	batched := newBasic(t, reg, `{"minute":2,"policy":"redis","fault_tolerant":false,"sync_rate":1,"redis":{"host":"127.0.0.1","port":`+
		strconv.Itoa(srv.Port())+`,"timeout":300}}`, Scope{RouteID: "r3"})
	runCalls(t, strict, []call{{t: time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "1"}}})
	srv.Stop()
	for i := range 3 {
		res, err := strict.Check(context.Background(), &Request{ClientIP: "10.0.0.9", Now: at(2 * time.Second)})
		if err == nil || res.Allowed || res.Status != 500 || string(res.Body) != `{"message":"An unexpected error occurred"}` {
			t.Fatalf("fault_tolerant false, call %d with redis down: %+v, %v; want a 500 and the error", i, res, err)
		}
		if !errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("fault_tolerant false, call %d: %v, want it to wrap redisstore.ErrUnavailable", i, err)
		}
	}
	res, err := batched.Check(context.Background(), &Request{ClientIP: "10.0.0.10", Now: at(2 * time.Second)})
	if err == nil || res.Status != 500 {
		t.Fatalf("fault_tolerant false, sync_rate 1, a new client with redis down: %+v, %v; want a 500", res, err)
	}
	for i, wantAllowed := range []bool{true, true, false} {
		res, err := tolerant.Check(context.Background(), &Request{ClientIP: "10.0.0.9", Now: at(2 * time.Second)})
		if err != nil || res.Allowed != wantAllowed {
			t.Fatalf("fault_tolerant true, call %d with redis down: %+v, %v; want allowed %v by local counters", i, res, err, wantAllowed)
		}
	}
}

// rate-limiting's Redis calls wait as long as its record's timeout, as
// Kong's socket timeout: a Redis paused for a second still decides when the
// timeout is longer, and fails the request (fault_tolerant false) when it
// is shorter, where the registry's default bound (200 ms) would have cut
// both short.
func TestBasicRedisTimeout(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	reg := newRegistry(t, RegistryOptions{RedisCallerClock: true})
	short := newBasic(t, reg, `{"minute":5,"policy":"redis","fault_tolerant":false,"redis":{"host":"127.0.0.1","port":`+
		strconv.Itoa(srv.Port())+`,"timeout":100}}`, Scope{RouteID: "short"})
	long := newBasic(t, reg, `{"minute":5,"policy":"redis","fault_tolerant":false,`+basicRedisJSON(srv)+`}`, Scope{RouteID: "long"})
	runCalls(t, short, []call{{t: time.Second, allowed: true}})
	runCalls(t, long, []call{{t: time.Second, allowed: true}})

	srv.Do(t, "CLIENT", "PAUSE", "2000", "ALL")
	res, err := short.Check(context.Background(), &Request{ClientIP: "10.0.0.9", Now: at(2 * time.Second)})
	if err == nil || res.Status != 500 {
		t.Fatalf("timeout 100 ms, Redis paused: %+v, %v; want a 500", res, err)
	}
	srv.Do(t, "PING") // answered when the pause ends

	srv.Do(t, "CLIENT", "PAUSE", "1000", "ALL")
	res, err = long.Check(context.Background(), &Request{ClientIP: "10.0.0.9", Now: at(2 * time.Second)})
	if err != nil || !res.Allowed {
		t.Fatalf("timeout %v, Redis paused 1 s: %+v, %v; want a decision by Redis", testRedisTimeout, res, err)
	}
	keys, _ := srv.Do(t, "KEYS", "*").([]any)
	counted := false
	for _, k := range keys {
		if v, _ := srv.Do(t, "GET", k.(string)).(string); strings.Contains(k.(string), "long") && strings.HasSuffix(k.(string), "10.0.0.9}:120000:1699999200000") && v == "1" {
			counted = true
		}
	}
	if !counted {
		t.Errorf("the paused call was not counted in Redis; keys %v", keys)
	}
}
