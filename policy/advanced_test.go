package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// t0 is an epoch-aligned instant: every window that divides an hour starts
// here.
var t0 = time.Unix(1_700_000_000-1_700_000_000%3600, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newRegistry(t *testing.T, opts RegistryOptions) *Registry {
	t.Helper()
	reg := NewRegistry(opts)
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Errorf("closing registry: %v", err)
		}
	})
	return reg
}

func newAdvanced(t *testing.T, reg *Registry, raw string) *Advanced {
	t.Helper()
	cfg, err := ParseAdvanced([]byte(raw))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	a, err := NewAdvanced(cfg, reg)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// hdr returns the value of a header, names compared case-insensitively,
// and whether it is present.
func hdr(res Result, name string) (string, bool) {
	for _, h := range res.Headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value, true
		}
	}
	return "", false
}

// want lists expected headers; "-" means absent.
type want map[string]string

func checkHeaders(t *testing.T, step int, res Result, w want) {
	t.Helper()
	for name, v := range w {
		got, ok := hdr(res, name)
		switch {
		case v == "-" && ok:
			t.Errorf("step %d: header %s = %q, want absent", step, name, got)
		case v != "-" && got != v:
			t.Errorf("step %d: header %s = %q (present %v), want %q", step, name, got, ok, v)
		}
	}
}

// call is one request on a timeline.
type call struct {
	t       time.Duration
	req     Request // Now is set from t
	allowed bool
	headers want
	repeat  int // extra identical calls before this one's checks
}

type checker interface {
	Check(context.Context, *Request) (Result, error)
}

func runCalls(t *testing.T, c checker, calls []call) []Result {
	t.Helper()
	var out []Result
	for i, cl := range calls {
		r := cl.req
		if r.ClientIP == "" {
			r.ClientIP = "10.0.0.1"
		}
		r.Now = at(cl.t)
		var res Result
		var err error
		for range cl.repeat + 1 {
			res, err = c.Check(context.Background(), &r)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if res.Allowed != cl.allowed {
			t.Fatalf("step %d (t=%s): allowed = %v, want %v (headers %v)", i, cl.t, res.Allowed, cl.allowed, res.Headers)
		}
		checkHeaders(t, i, res, cl.headers)
		out = append(out, res)
	}
	return out
}

// Sliding-window rate: W = 60, 30 s into the window, current 10 (this request included),
// previous 40: weight 0.5, rate 30.
func TestSlidingRateExample(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[100],"window_size":[60],"namespace":"n"}`)
	runCalls(t, a, []call{
		{t: -30 * time.Second, repeat: 39, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "60"}},
		{t: 0, repeat: 8, allowed: true},
		{t: 30 * time.Second, allowed: true, headers: want{
			"X-RateLimit-Limit-minute": "100", "X-RateLimit-Remaining-minute": "70",
			"RateLimit-Limit": "100", "RateLimit-Remaining": "70", "RateLimit-Reset": "30", "Retry-After": "-",
		}},
	})
}

// A fixed window: requests 1..L pass, L+1 is rejected,
// with the exact body and status, and the reset is the rest of the window.
func TestFixedWindowLimit(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[3],"window_size":[60],"window_type":"fixed","namespace":"n"}`)
	res := runCalls(t, a, []call{
		{t: 10 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "2", "RateLimit-Reset": "50"}},
		{t: 20 * time.Second, repeat: 1, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "0"}},
		{t: 59 * time.Second, allowed: false, headers: want{"X-RateLimit-Remaining-minute": "0", "RateLimit-Reset": "1", "Retry-After": "1",
			"Content-Type": "application/json; charset=utf-8"}},
		{t: 60 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "2", "RateLimit-Reset": "60"}},
	})
	if res[2].Status != 429 || string(res[2].Body) != `{"message":"API rate limit exceeded"}` {
		t.Errorf("rejection = %d %s", res[2].Status, res[2].Body)
	}
}

// Without disable_penalty a client that keeps sending stays
// blocked; with it, some requests get through in every window.
func TestPenalty(t *testing.T) {
	count := func(disable bool) int {
		a := newAdvanced(t, newRegistry(t, RegistryOptions{}),
			`{"limit":[10],"window_size":[10],"namespace":"n","disable_penalty":`+map[bool]string{true: "true", false: "false"}[disable]+`}`)
		ok := 0
		// 4 requests per second for a minute: 40 per window, limit 10.
		for ms := 0; ms < 60_000; ms += 250 {
			res, err := a.Check(context.Background(), &Request{ClientIP: "1.1.1.1", Now: at(time.Duration(ms) * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed && ms >= 20_000 {
				ok++
			}
		}
		return ok
	}
	if n := count(false); n != 0 {
		t.Errorf("with penalty: %d requests admitted after the first two windows, want 0", n)
	}
	if n := count(true); n < 4*5 {
		t.Errorf("disable_penalty: %d requests admitted in four windows, want some in each", n)
	}
}

// Limits 3/5 s and 5/10 s; after the third request the 5 s window
// has 0 left and the 10 s window 2; the RateLimit-* headers describe the
// 5 s window; further requests are rejected and the 10 s values stay 2.
func TestMultiWindowHeaders(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5,3],"window_size":[10,5],"namespace":"n"}`)
	runCalls(t, a, []call{
		{t: 0, repeat: 2, allowed: true, headers: want{
			"X-RateLimit-Limit-5": "3", "X-RateLimit-Remaining-5": "0",
			"X-RateLimit-Limit-10": "5", "X-RateLimit-Remaining-10": "2",
			"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "5",
		}},
		{t: time.Second, allowed: false, headers: want{"X-RateLimit-Remaining-5": "0", "X-RateLimit-Remaining-10": "2", "RateLimit-Limit": "3"}},
		{t: 2 * time.Second, allowed: false, headers: want{"X-RateLimit-Remaining-10": "2"}},
	})
	// Header order: per window in stored order, then RateLimit-*.
	res, _ := a.Check(context.Background(), &Request{ClientIP: "9.9.9.9", Now: at(0)})
	var names []string
	for _, h := range res.Headers {
		names = append(names, h.Name)
	}
	got := strings.Join(names, ",")
	if got != "X-RateLimit-Limit-5,X-RateLimit-Remaining-5,X-RateLimit-Limit-10,X-RateLimit-Remaining-10,RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset" {
		t.Errorf("header order %s", got)
	}
}

// Ties: equal remaining, the larger window is reported; equal
// window sizes send one pair of headers, with the later window's values.
func TestReportedWindowTie(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[2,2],"window_size":[1,60],"window_type":"fixed","namespace":"n"}`)
	runCalls(t, a, []call{{t: 0, allowed: true, headers: want{"RateLimit-Reset": "60", "RateLimit-Remaining": "1"}}})
	b := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[2,5],"window_size":[60,60],"window_type":"fixed","namespace":"n"}`)
	res := runCalls(t, b, []call{{t: 0, allowed: true, headers: want{"X-RateLimit-Limit-minute": "5", "X-RateLimit-Remaining-minute": "4", "RateLimit-Remaining": "1"}}})
	if len(res[0].Headers) != 5 {
		t.Errorf("headers %v: want one pair for the two 60 s windows", res[0].Headers)
	}
}

// The reset of an exceeded sliding window adds the time the excess
// needs to drain, and the pin makes the first term decay to 1 during
// continuous overload.
func TestSlidingResetPin(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[2],"window_size":[10],"namespace":"n"}`)
	runCalls(t, a, []call{
		{t: 0, repeat: 1, allowed: true, headers: want{"RateLimit-Reset": "10"}},
		// rate 3 > 2: base 10 - 2 = 8, excess (3-2)/2*10 = 5.
		{t: 2 * time.Second, allowed: false, headers: want{"RateLimit-Reset": "13", "Retry-After": "13"}},
		// Next window, still over: prev 3 (the rejection stays counted),
		// cur 1, weight 0.8: rate 3.4, excess 7; the pinned start t0 gives
		// base max(1, 10-12) = 1 (unpinned it would be 8).
		{t: 12 * time.Second, allowed: false, headers: want{"RateLimit-Reset": "8"}},
	})
	// Another client is not affected by that pin: rate 3 at 2 s into its
	// window, base 8, excess 5.
	runCalls(t, a, []call{
		{t: 12 * time.Second, req: Request{ClientIP: "10.9.9.9"}, repeat: 2, allowed: false, headers: want{"RateLimit-Reset": "13"}},
	})
}

// Retry-After = reset + floor(U*max)+1, in 1..ceil(max).
func TestJitterBounds(t *testing.T) {
	for _, c := range []struct {
		u, max float64
		extra  int64
	}{{0, 5, 1}, {0.999999, 5, 5}, {0.5, 0.5, 1}, {0.99, 0.5, 1}, {0.2, 3.5, 1}, {0.99, 3.5, 4}} {
		if got := jitter(c.max, func() float64 { return c.u }); got != c.extra {
			t.Errorf("jitter(U=%v, max=%v) = %d, want %d", c.u, c.max, got, c.extra)
		}
	}
	u := 0.7
	reg := newRegistry(t, RegistryOptions{Rand: func() float64 { return u }})
	a := newAdvanced(t, reg, `{"limit":[1],"window_size":[60],"window_type":"fixed","retry_after_jitter_max":10,"namespace":"n"}`)
	runCalls(t, a, []call{
		{t: 0, allowed: true, headers: want{"Retry-After": "-"}},
		{t: 30 * time.Second, allowed: false, headers: want{"RateLimit-Reset": "30", "Retry-After": "38"}},
	})
}

// hide_client_headers, error_code and error_message.
func TestHideHeadersAndCustomError(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}),
		`{"limit":[1],"window_size":[60],"namespace":"n","hide_client_headers":true,"error_code":403,"error_message":"slow \"down\""}`)
	res := runCalls(t, a, []call{
		{t: 0, allowed: true},
		{t: time.Second, allowed: false},
	})
	if len(res[0].Headers) != 0 {
		t.Errorf("allowed headers %v, want none", res[0].Headers)
	}
	if len(res[1].Headers) != 1 || res[1].Headers[0].Name != "Content-Type" {
		t.Errorf("rejection headers %v, want only Content-Type", res[1].Headers)
	}
	if res[1].Status != 403 || string(res[1].Body) != `{"message":"slow \"down\""}` {
		t.Errorf("rejection %d %s", res[1].Status, res[1].Body)
	}
}

// Two instances with one namespace share counters; a reload (a new
// instance, old one closed after) keeps them.
func TestNamespaceSharing(t *testing.T) {
	reg := newRegistry(t, RegistryOptions{})
	routeA := newAdvanced(t, reg, `{"limit":[3],"window_size":[60],"namespace":"shared","identifier":"ip"}`)
	routeB := newAdvanced(t, reg, `{"limit":[3],"window_size":[60],"namespace":"shared","identifier":"ip"}`)
	other := newAdvanced(t, reg, `{"limit":[3],"window_size":[60],"namespace":"other","identifier":"ip"}`)
	runCalls(t, routeA, []call{{t: 0, repeat: 2, allowed: true}})
	runCalls(t, routeB, []call{{t: time.Second, allowed: false}})
	runCalls(t, other, []call{{t: time.Second, allowed: true}})

	reloaded := newAdvanced(t, reg, `{"limit":[4],"window_size":[60],"namespace":"shared","identifier":"ip"}`)
	if err := routeA.Close(); err != nil {
		t.Fatal(err)
	}
	if err := routeB.Close(); err != nil {
		t.Fatal(err)
	}
	// 3 counted plus 1 penalised rejection: the reload sees 4 of 4 used.
	runCalls(t, reloaded, []call{{t: 2 * time.Second, allowed: false, headers: want{"X-RateLimit-Limit-minute": "4"}}})
}

// Identifiers and their fallbacks.
func TestIdentifiers(t *testing.T) {
	hdrs := func(m map[string]string) func(string) string {
		return func(n string) string { return m[strings.ToLower(n)] }
	}
	full := Request{
		ClientIP: "10.0.0.1", Consumer: Consumer{ID: "c-1", Username: "alice", CustomID: "cust-1"},
		CredentialID: "cred-1", ServiceID: "svc-1", RouteID: "rt-1", Path: "/orders",
		Header: hdrs(map[string]string{"x-tenant": "acme"}),
		Groups: []Group{{ID: "g-1", Name: "gold"}}, ScopeGroup: Group{ID: "g-1", Name: "gold"},
		Dimension: "tenant=acme|plan=pro",
	}
	anon := Request{ClientIP: "10.0.0.2", Path: "/other"}
	cases := []struct {
		cfg       string
		req       Request
		want      string
		anonymous string
	}{
		{`"identifier":"ip"`, full, "10.0.0.1", "10.0.0.2"},
		{`"identifier":"credential"`, full, "cred-1", "10.0.0.2"},
		{`"identifier":"consumer"`, full, "c-1", "10.0.0.2"},
		{`"identifier":"consumer","counter_key":"consumer.username"`, full, "alice", "10.0.0.2"},
		{`"identifier":"consumer","counter_key":"consumer.custom_id"`, full, "cust-1", "10.0.0.2"},
		{`"identifier":"service"`, full, "svc-1", "10.0.0.2"},
		{`"identifier":"route"`, full, "rt-1", "10.0.0.2"},
		{`"identifier":"header","header_name":"X-Tenant"`, full, "acme", "10.0.0.2"},
		{`"identifier":"path","path":"/orders"`, full, "/orders", "10.0.0.2"},
		{`"identifier":"consumer-group"`, full, "g-1", "10.0.0.2"},
		{`"identifier":"dimension"`, full, "tenant=acme|plan=pro", "10.0.0.2"},
		{`"compound_identifier":["service","consumer"]`, full, "svc-1:c-1", "10.0.0.2"},
		// Compound fallback: one item missing abandons the compound key
		// for the identifier, then the IP.
		{`"compound_identifier":["consumer","header"],"identifier":"service","header_name":"X-None"`, full, "svc-1", "10.0.0.2"},
	}
	for _, c := range cases {
		a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5],"window_size":[60],"namespace":"n",`+c.cfg+`}`)
		r := c.req
		r.Now = t0
		res, err := a.Check(context.Background(), &r)
		if err != nil || res.Key != c.want {
			t.Errorf("%s: key %q (%v), want %q", c.cfg, res.Key, err, c.want)
		}
		an := anon
		an.Now = t0
		res, err = a.Check(context.Background(), &an)
		if err != nil || res.Key != c.anonymous {
			t.Errorf("%s, anonymous: key %q (%v), want %q", c.cfg, res.Key, err, c.anonymous)
		}
	}
	// consumer-group on an instance not scoped to a group: the IP.
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5],"window_size":[60],"namespace":"n","identifier":"consumer-group"}`)
	r := full
	r.ScopeGroup = Group{}
	r.Now = t0
	if res, _ := a.Check(context.Background(), &r); res.Key != "10.0.0.1" {
		t.Errorf("unscoped consumer-group key %q, want the IP", res.Key)
	}
	// A consumer without the counter_key's value falls back to the IP;
	// a long key is hashed.
	b := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5],"window_size":[60],"namespace":"n","identifier":"dimension"}`)
	r = Request{ClientIP: "1.2.3.4", Dimension: strings.Repeat("x", 300), Now: t0}
	if res, _ := b.Check(context.Background(), &r); len(res.Key) != 64 {
		t.Errorf("long key %q, want a SHA-256 hex", res.Key)
	}
}

// Legacy overrides, first listed group that the consumer is in
// decides; a group without an override uses the plugin's limits.
func TestConsumerGroupOverrides(t *testing.T) {
	cfg, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[60],"namespace":"n","enforce_consumer_groups":true,"consumer_groups":["silver","gold","bronze"]}`))
	if err != nil {
		t.Fatal(err)
	}
	gold, _ := ParseOverride([]byte(`{"limit":[3],"window_size":[60],"window_type":"fixed"}`))
	silver, _ := ParseOverride([]byte(`{"limit":[2],"window_size":[30]}`))
	cfg.Overrides = map[string]*OverrideConfig{"gold": gold, "silver": silver}
	a, err := NewAdvanced(cfg, newRegistry(t, RegistryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	req := func(id string, groups ...Group) Request {
		return Request{ClientIP: "10.0.0.1", Consumer: Consumer{ID: id}, Groups: groups}
	}
	runCalls(t, a, []call{
		{req: req("c1", Group{ID: "g-gold", Name: "gold"}), allowed: true, headers: want{"X-RateLimit-Limit-minute": "3"}},
		// silver is listed first: it wins over gold.
		{req: req("c2", Group{Name: "gold"}, Group{ID: "g-silver", Name: "silver"}), allowed: true, headers: want{"X-RateLimit-Limit-minute": "-", "X-RateLimit-Limit-30": "2"}},
		{req: req("c3", Group{Name: "bronze"}), allowed: true, headers: want{"X-RateLimit-Limit-minute": "1"}},
		{req: req("c4"), allowed: true, headers: want{"X-RateLimit-Limit-minute": "1"}},
	})
	// enforce_consumer_groups off: overrides ignored.
	cfg.EnforceConsumerGroups = false
	b, err := NewAdvanced(cfg, newRegistry(t, RegistryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	runCalls(t, b, []call{{req: req("c1", Group{Name: "gold"}), allowed: true, headers: want{"X-RateLimit-Limit-minute": "1"}}})
}

// Extensions: IETF headers and shadow mode.
func TestExtensions(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[10,2],"window_size":[60,1],"namespace":"n","sluice":{"ietf_headers":true}}`)
	runCalls(t, a, []call{{t: 0, allowed: true, headers: want{
		"RateLimit-Policy": `"second";q=2;w=1, "minute";q=10;w=60`, "RateLimit": `"second";r=1;t=1`}}})
	s := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[1],"window_size":[60],"namespace":"n","sluice":{"shadow":true}}`)
	res := runCalls(t, s, []call{{t: 0, allowed: true}, {t: 1, allowed: true}})
	if res[0].Denied || !res[1].Denied || len(res[1].Headers) != 0 || res[1].Status != 0 {
		t.Errorf("shadow results %+v", res)
	}
	// The report still says what the headers would have (rate 2 of 1:
	// 60 s left plus 60 s of excess).
	if r := res[1]; r.Window != time.Minute || r.Limit != 1 || r.Remaining != 0 || r.Reset != 120 {
		t.Errorf("shadow report: window %s limit %d remaining %d reset %d", r.Window, r.Limit, r.Remaining, r.Reset)
	}
}

// The alphabetically first group with an instance runs.
func TestSelectScopeGroup(t *testing.T) {
	groups := []Group{{ID: "3", Name: "silver"}, {ID: "1", Name: "gold"}, {ID: "2", Name: "bronze"}}
	has := func(g Group) bool { return g.Name != "bronze" }
	if g, ok := SelectScopeGroup(groups, has); !ok || g.Name != "gold" {
		t.Errorf("selected %+v, %v; want gold", g, ok)
	}
	if _, ok := SelectScopeGroup(groups, func(Group) bool { return false }); ok {
		t.Error("selected a group without instances")
	}
}

// A deviation from Kong (docs/kong-compatibility.md): with disable_penalty a rejection
// takes back only the increments it made; a later window that was only
// read keeps its count (Kong would subtract from it too).
func TestPenaltyUndoOnlyOwnIncrements(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[1,10],"window_size":[1,60],"namespace":"n","disable_penalty":true}`)
	runCalls(t, a, []call{
		{t: 0, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "9"}},
		{t: 100 * time.Millisecond, allowed: false, headers: want{"X-RateLimit-Remaining-second": "0", "X-RateLimit-Remaining-minute": "9"}},
		// The minute holds the two admitted requests only.
		{t: 2 * time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-minute": "8"}},
	})
}

// NewAdvanced validates a hand-built config, every error at once.
func TestNewAdvancedValidates(t *testing.T) {
	_, err := NewAdvanced(&AdvancedConfig{Limit: []int64{1}, WindowSize: []int64{1, 2}, WindowType: "x", Strategy: "local", Identifier: "ip", ErrorCode: 429}, newRegistry(t, RegistryOptions{}))
	want := "policy: invalid config: config.window_size: You must provide the same number of windows and limits; " +
		"config.namespace: namespace must be a non-empty string without '|'; config.window_type: expected one of: sliding, fixed"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

// Values of 4096 and more are formatted rather than taken from the table.
func TestLargeHeaderValues(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[100000,5000],"window_size":[86400,4095],"namespace":"n","window_type":"fixed"}`)
	runCalls(t, a, []call{{t: 0, allowed: true, headers: want{
		"X-RateLimit-Limit-4095": "5000", "X-RateLimit-Remaining-4095": "4999",
		"X-RateLimit-Limit-day": "100000", "X-RateLimit-Remaining-day": "99999",
		"RateLimit-Remaining": "4999", "RateLimit-Reset": "3195"}}})
	runCalls(t, a, []call{{t: time.Second, allowed: true, headers: want{"X-RateLimit-Remaining-day": "99998", "RateLimit-Reset": "3194"}}})
}

// CheckAppend appends to the caller's buffer and allocates nothing for the
// headers when it has room; Check's headers are its own.
func TestCheckAppend(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[3],"window_size":[60],"window_type":"fixed","namespace":"n"}`)
	buf := make([]Header, 1, 16)
	buf[0] = Header{"X-Before", "1"}
	r := Request{ClientIP: "10.0.0.1", Now: t0}
	res, err := a.CheckAppend(context.Background(), &r, buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Headers) != 6 || &res.Headers[0] != &buf[0] || res.Headers[0].Name != "X-Before" {
		t.Fatalf("headers %v: want the buffer's header then 5 more, in the buffer", res.Headers)
	}
	checkHeaders(t, 0, res, want{"X-RateLimit-Remaining-minute": "2"})
	n := testing.AllocsPerRun(100, func() {
		r := Request{ClientIP: "10.0.0.2", Now: t0}
		if _, err := a.CheckAppend(context.Background(), &r, buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("CheckAppend with room: %v allocations, want 0", n)
	}
	// Beyond 4 windows too (the store's decision holds 4 inline).
	six := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[10,100,1000,10000,100000,200000],"window_size":[1,60,3600,86400,2592000,31536000],"namespace":"six"}`)
	ips := []string{"10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6", "10.0.1.7", "10.0.1.8", "10.0.1.9", "10.0.1.10", "10.0.1.11", "10.0.1.12"}
	i := 0
	n = testing.AllocsPerRun(100, func() { // at most 9 calls per client: all allowed
		r := Request{ClientIP: ips[i%len(ips)], Now: t0}
		i++
		if res, err := six.CheckAppend(context.Background(), &r, buf[:0]); err != nil || len(res.Headers) != 15 {
			t.Fatalf("six windows: %d headers, %v; want 15", len(res.Headers), err)
		}
	})
	// The store's own decision allocates beyond 4 limits; the policy adds
	// nothing to it.
	store := memorystore.New(memorystore.Options{})
	defer store.Close()
	var lims []ratelimit.Limit
	for _, w := range []int64{1, 60, 3600, 86400, 2592000, 31536000} {
		lims = append(lims, ratelimit.Every(1000, time.Duration(w)*time.Second))
	}
	storeAllocs := testing.AllocsPerRun(100, func() {
		_, _ = store.Take(context.Background(), ratelimit.Request{Key: "k", Limits: lims, Now: t0, Penalty: true})
	})
	if n != storeAllocs {
		t.Errorf("CheckAppend with six windows: %v allocations, want the bare store's %v", n, storeAllocs)
	}
	b := newBasic(t, newRegistry(t, RegistryOptions{}), `{"minute":3}`, Scope{})
	bres, err := b.CheckAppend(context.Background(), &r, buf[:0])
	if err != nil || len(bres.Headers) != 5 || &bres.Headers[0] != &buf[0] {
		t.Errorf("Basic.CheckAppend headers %v, %v: want them in the buffer", bres.Headers, err)
	}
}
