package policy

import (
	"context"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"strings"
	"testing"
	"time"
)

func newBasic(t *testing.T, reg *Registry, raw string, scope Scope) *Basic {
	t.Helper()
	cfg, err := ParseBasic([]byte(raw))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	b, err := NewBasic(cfg, scope, reg)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Allowed iff every period's count is below its limit before this
// request; remaining counts this request when allowed; denied requests are
// not counted with the local policy; Retry-After = RateLimit-Reset.
func TestBasicTimeline(t *testing.T) {
	b := newBasic(t, newRegistry(t, RegistryOptions{}), `{"second":2,"minute":3}`, Scope{})
	runCalls(t, b, []call{
		{t: 10 * time.Second, allowed: true, headers: want{
			"X-RateLimit-Limit-Second": "2", "X-RateLimit-Remaining-Second": "1",
			"X-RateLimit-Limit-Minute": "3", "X-RateLimit-Remaining-Minute": "2",
			"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1"}},
		{t: 10 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Second": "0", "X-RateLimit-Remaining-Minute": "1"}},
		// Denied by the second: the second shows 0, the minute its count
		// without this request.
		{t: 10*time.Second + 500*time.Millisecond, allowed: false, headers: want{
			"X-RateLimit-Remaining-Second": "0", "X-RateLimit-Remaining-Minute": "1", "Retry-After": "1", "RateLimit-Reset": "1"}},
		{t: 11 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "0",
			"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "49"}},
		{t: 12 * time.Second, allowed: false, headers: want{"X-RateLimit-Remaining-Minute": "0", "Retry-After": "48"}},
	})
}

// A global instance shares one counter per identifier across
// services; with limit_by credential, minute 6, after 6 calls on service 1
// the calls on service 2 are rejected with remaining 0. A route-scoped
// instance has counters of its own.
func TestBasicScope(t *testing.T) {
	reg := newRegistry(t, RegistryOptions{})
	global := newBasic(t, reg, `{"minute":6,"limit_by":"credential"}`, Scope{})
	cred := Request{CredentialID: "cred-1"}
	svc1, svc2 := cred, cred
	svc1.ServiceID, svc2.ServiceID = "s1", "s2"
	runCalls(t, global, []call{
		{req: svc1, repeat: 5, allowed: true},
		{t: time.Second, req: svc2, repeat: 6, allowed: false, headers: want{"X-RateLimit-Remaining-Minute": "0"}},
	})
	routed := newBasic(t, reg, `{"minute":6,"limit_by":"credential","route_id":"r-1"}`, Scope{})
	runCalls(t, routed, []call{{t: time.Second, req: svc1, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "5"}}})
}

// Month and year are calendar periods (UTC): a month's counter lasts
// the whole month and restarts on the 1st; the reset assumes 30 days.
func TestBasicCalendarPeriods(t *testing.T) {
	b := newBasic(t, newRegistry(t, RegistryOptions{}), `{"hour":2,"month":2}`, Scope{})
	jan31 := time.Date(2026, time.January, 31, 23, 0, 0, 0, time.UTC)
	calls := []struct {
		now     time.Time
		allowed bool
		w       want
	}{
		{time.Date(2026, time.January, 3, 0, 0, 0, 0, time.UTC), true, want{"X-RateLimit-Remaining-Month": "1", "X-RateLimit-Remaining-Hour": "1"}},
		{jan31, true, want{"X-RateLimit-Remaining-Month": "0", "RateLimit-Limit": "2", "RateLimit-Reset": "1"}},
		{jan31.Add(time.Minute), false, want{"X-RateLimit-Remaining-Month": "0", "X-RateLimit-Remaining-Hour": "1"}},
		{time.Date(2026, time.February, 1, 0, 0, 1, 0, time.UTC), true, want{"X-RateLimit-Remaining-Month": "1", "RateLimit-Reset": "2591999"}},
	}
	for i, c := range calls {
		r := Request{ClientIP: "10.0.0.1", Now: c.now}
		res, err := b.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != c.allowed {
			t.Fatalf("step %d: allowed %v, want %v", i, res.Allowed, c.allowed)
		}
		checkHeaders(t, i, res, c.w)
	}
}

// The OSS plugin's fault tolerance (a failing store allows) and hidden headers.
func TestBasicFaultTolerantAndHidden(t *testing.T) {
	failing := RegistryOptions{NewLocalStore: func(string) (ratelimitStore, error) { return brokenStore{}, nil }}
	tolerant := newBasic(t, newRegistry(t, failing), `{"minute":1}`, Scope{})
	res, err := tolerant.Check(context.Background(), &Request{ClientIP: "1.1.1.1", Now: t0})
	if err == nil || !res.Allowed || len(res.Headers) != 0 {
		t.Errorf("fault tolerant: %+v, %v; want allowed without headers and an error", res, err)
	}
	strict := newBasic(t, newRegistry(t, failing), `{"minute":1,"fault_tolerant":false}`, Scope{})
	res, err = strict.Check(context.Background(), &Request{ClientIP: "1.1.1.1", Now: t0})
	if err == nil || res.Allowed || res.Status != 500 || string(res.Body) != `{"message":"An unexpected error occurred"}` {
		t.Errorf("not fault tolerant: %+v, %v; want a 500", res, err)
	}
	hidden := newBasic(t, newRegistry(t, RegistryOptions{}), `{"minute":1,"hide_client_headers":true,"error_message":"no"}`, Scope{})
	rs := runCalls(t, hidden, []call{{allowed: true}, {allowed: false}})
	if len(rs[0].Headers) != 0 || len(rs[1].Headers) != 1 || !strings.Contains(string(rs[1].Body), `"no"`) {
		t.Errorf("hidden headers: %+v", rs)
	}
}

// On a rejection the other periods show limit - count, their plain count
// (no previous window weighed in); the local policy counts the rejected
// request nowhere, the redis policy everywhere with sync_rate -1 (Kong
// increments first) and nowhere with a positive one.
func TestBasicRejectionCounts(t *testing.T) {
	memRedis := RegistryOptions{NewRedisStore: func(RedisStoreConfig) (ratelimitStore, error) {
		return memorystore.New(memorystore.Options{}), nil
	}}
	for _, c := range []struct {
		policy string
		opts   RegistryOptions
		next   string // minute remaining of the next allowed call
	}{
		{`"local"`, RegistryOptions{}, "7"},
		{`"redis","redis":{"host":"127.0.0.1"}`, memRedis, "6"},
		// A positive sync_rate reads Kong's local copy: a rejection is not
		// counted, as with the local policy.
		{`"redis","sync_rate":0.5,"redis":{"host":"127.0.0.1"}`, memRedis, "7"},
	} {
		b := newBasic(t, newRegistry(t, c.opts), `{"second":1,"minute":10,"policy":`+c.policy+`}`, Scope{})
		runCalls(t, b, []call{
			// Five calls in the previous minute: a weighted read would show them.
			{t: -30 * time.Second, allowed: true},
			{t: -20 * time.Second, allowed: true},
			{t: -10 * time.Second, allowed: true},
			{t: 5 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "9"}},
			{t: 20 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "8"}},
			{t: 20*time.Second + time.Millisecond, allowed: false, headers: want{"X-RateLimit-Remaining-Second": "0", "X-RateLimit-Remaining-Minute": "8"}},
			{t: 21 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": c.next}},
		})
	}
	// A rejection by the month counts nowhere with the local policy.
	b := newBasic(t, newRegistry(t, RegistryOptions{}), `{"minute":5,"month":5}`, Scope{})
	runCalls(t, b, []call{
		{t: 0, repeat: 4, allowed: true, headers: want{"X-RateLimit-Remaining-Month": "0", "X-RateLimit-Remaining-Minute": "0"}},
		{t: 60 * time.Second, repeat: 2, allowed: false, headers: want{"X-RateLimit-Remaining-Minute": "5", "X-RateLimit-Remaining-Month": "0"}},
	})
}
