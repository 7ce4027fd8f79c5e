package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
)

func TestAdvancedInspectExplainReset(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, RegistryOptions{})
	a := newAdvanced(t, reg, `{"limit":[2],"window_size":[60],"namespace":"ns","identifier":"consumer","strategy":"local"}`)
	a.top.sample = 1 // count every allowed decision
	r := &Request{Consumer: Consumer{ID: "c-1"}, ClientIP: "10.0.0.1", Now: at(10 * time.Second)}
	for i, want := range []bool{true, true, false} {
		res, err := a.Check(ctx, r)
		if err != nil || res.Allowed != want {
			t.Fatalf("check %d: allowed %v, %v; want %v", i, res.Allowed, err, want)
		}
	}
	top := a.Top(r.Now, TopByDenied, 10)
	if len(top) != 1 || top[0] != (TopEntry{Identifier: "c-1", Requests: 3, Denied: 1}) {
		t.Fatalf("Top = %+v; want c-1 with 3 requests, 1 denied", top)
	}
	c, err := a.Counter(ctx, "c-1", r.Now)
	if err != nil || len(c.Windows) != 1 {
		t.Fatalf("Counter: %+v, %v", c, err)
	}
	w := c.Windows[0]
	// Kong keeps a denied request counted (penalty).
	if w.Current != 3 || w.Limit != 2 || w.Remaining != 0 || w.Window != 60 || w.Reset != 80 || !w.WindowStart.Equal(t0) {
		t.Fatalf("window = %+v; want 3 of 2, none remaining, reset in 50+30 s (the excess drains)", w)
	}
	for range 2 {
		ex, err := a.Explain(ctx, r)
		if err != nil || ex.Allowed || !ex.Denied || ex.Status != 429 || ex.DeniedWindow != 60 || ex.Key != "c-1" {
			t.Fatalf("Explain: %+v, %v; want denied by the 60 s window", ex, err)
		}
	}
	if c2, _ := a.Counter(ctx, "c-1", r.Now); c2.Windows[0].Current != 3 {
		t.Fatalf("Explain counted: current %d, want 3", c2.Windows[0].Current)
	}
	if err := a.Reset(ctx, "c-1", r.Now); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if c, _ := a.Counter(ctx, "c-1", r.Now); !c.Empty() {
		t.Fatalf("Counter after Reset = %+v; want empty", c)
	}
	if res, _ := a.Check(ctx, r); !res.Allowed {
		t.Fatal("denied after Reset")
	}
	info := a.Info()
	if info.Namespace != "ns" || info.Strategy != "local" || info.Identifier != "consumer" || len(info.Limits) != 1 ||
		info.Limits[0] != (LimitInfo{Limit: 2, Window: 60, Name: "minute"}) || info.Store.State != "local" || info.Store.Counters != 1 {
		t.Fatalf("Info = %+v", info)
	}
}

func TestBasicInspectExplainReset(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, RegistryOptions{})
	cfg, err := ParseBasic([]byte(`{"minute":2,"month":100,"limit_by":"ip","policy":"local"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBasic(cfg, Scope{RouteID: "r-1"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.top.sample = 1
	r := &Request{ClientIP: "10.0.0.1", Now: at(10 * time.Second)}
	for i, want := range []bool{true, true, false} {
		if res, err := b.Check(ctx, r); err != nil || res.Allowed != want {
			t.Fatalf("check %d: allowed %v, %v; want %v", i, res.Allowed, err, want)
		}
	}
	ex, err := b.Explain(ctx, r)
	if err != nil || ex.Allowed || ex.DeniedWindow != 60 || len(ex.Windows) != 2 ||
		ex.Windows[0].Current != 2 || ex.Windows[1].Current != 2 || ex.Windows[1].Name != "month" {
		t.Fatalf("Explain: %+v, %v; want denied by the minute, 2 in the minute and the month", ex, err)
	}
	if top := b.Top(r.Now, TopByRequests, 1); len(top) != 1 || top[0].Identifier != "10.0.0.1" || top[0].Requests != 3 {
		t.Fatalf("Top = %+v", top)
	}
	if err := b.Reset(ctx, "10.0.0.1", r.Now); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Counter(ctx, "10.0.0.1", r.Now); err != nil || !c.Empty() {
		t.Fatalf("Counter after Reset = %+v, %v", c, err)
	}
	if res, _ := b.Check(ctx, r); !res.Allowed {
		t.Fatal("denied after Reset")
	}
}

func TestConcurrencyInspectReset(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, RegistryOptions{})
	limit := int64(1)
	c, err := NewConcurrency(&ConcurrencyConfig{Limit: &limit, Identifier: "consumer"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &Request{Consumer: Consumer{ID: "c-1"}, Now: at(0)}
	if res, _ := c.Acquire(ctx, r); !res.Allowed {
		t.Fatal("first lease denied")
	}
	if ex, err := c.Explain(ctx, r); err != nil || ex.Allowed || len(ex.Leases) != 1 || !ex.Leases[0].Expires.Equal(at(time.Minute)) {
		t.Fatalf("Explain: %+v, %v; want denied, one lease until t0+1m", ex, err)
	}
	if res, _ := c.Acquire(ctx, r); res.Allowed {
		t.Fatal("second lease allowed")
	}
	if top := c.Top(r.Now, TopByDenied, 5); len(top) != 1 || top[0].Identifier != "c-1" || top[0].Denied != 1 {
		t.Fatalf("Top = %+v", top)
	}
	if err := c.Reset(ctx, "c-1", r.Now); err != nil {
		t.Fatal(err)
	}
	if cnt, err := c.Counter(ctx, "c-1", r.Now); err != nil || !cnt.Empty() {
		t.Fatalf("Counter after Reset = %+v, %v", cnt, err)
	}
	if res, _ := c.Acquire(ctx, r); !res.Allowed {
		t.Fatal("denied after Reset")
	}
}

// A request without the configured identifier is counted under its client
// IP; Top lists the IP, and Counter and Reset find it there.
func TestConcurrencyInspectIPFallback(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, RegistryOptions{})
	limit := int64(1)
	c, err := NewConcurrency(&ConcurrencyConfig{Limit: &limit, Identifier: "header", HeaderName: "X-Tenant"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	anon := &Request{ClientIP: "10.0.0.9", Now: at(0)}
	tenant := &Request{ClientIP: "10.0.0.9", Header: func(n string) string { return map[string]string{"X-Tenant": "acme"}[n] }, Now: at(0)}
	for _, r := range []*Request{anon, anon, tenant} {
		if _, err := c.Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	top := c.Top(anon.Now, TopByDenied, 5)
	if len(top) != 1 || top[0].Identifier != "10.0.0.9" || top[0].Denied != 1 {
		t.Fatalf("Top = %+v; want 10.0.0.9 with one denial", top)
	}
	cnt, err := c.Counter(ctx, "10.0.0.9", anon.Now)
	if err != nil || len(cnt.Leases) != 1 || cnt.Key != ratelimit.Key("ip", "10.0.0.9") {
		t.Fatalf("Counter(10.0.0.9) = %+v, %v; want one lease under ip:10.0.0.9", cnt, err)
	}
	if cnt, err := c.Counter(ctx, "acme", anon.Now); err != nil || len(cnt.Leases) != 1 || cnt.Key != ratelimit.Key("header", "acme") {
		t.Fatalf("Counter(acme) = %+v, %v; want one lease under header:acme", cnt, err)
	}
	if cnt, err := c.Counter(ctx, "nobody", anon.Now); err != nil || !cnt.Empty() || cnt.Key != ratelimit.Key("header", "nobody") {
		t.Fatalf("Counter(nobody) = %+v, %v; want empty under header:nobody", cnt, err)
	}
	if err := c.Reset(ctx, "10.0.0.9", anon.Now); err != nil {
		t.Fatal(err)
	}
	if cnt, err := c.Counter(ctx, "10.0.0.9", anon.Now); err != nil || !cnt.Empty() {
		t.Fatalf("Counter after Reset = %+v, %v", cnt, err)
	}
	if res, _ := c.Acquire(ctx, anon); !res.Allowed {
		t.Fatal("request without the header denied after Reset")
	}
	if cnt, _ := c.Counter(ctx, "acme", anon.Now); len(cnt.Leases) != 1 {
		t.Fatalf("Reset of the IP dropped another identifier's lease: %+v", cnt)
	}
}

// The sketch keeps every identifier with more than 1/K of the requests,
// bounds its memory by K and forgets what is older than a minute.
func TestTopKeysSketch(t *testing.T) {
	t.Run("sampled", testTopKeysSampled)
	tk := NewTopKeys(8)
	tk.sample = 1
	now := at(0)
	for i := range 1000 {
		tk.Record(now, fmt.Sprint("cold-", i), false) // 1000 distinct, once each
		if i%4 == 0 {
			tk.Record(now, "hot", true)
		}
	}
	top := tk.Top(now, TopByRequests, 3)
	if len(top) == 0 || top[0].Identifier != "hot" || top[0].Requests-top[0].Error > 250 || top[0].Requests < 250 {
		t.Fatalf("top = %+v; want hot first, with 250 requests within its error", top)
	}
	if d := tk.Top(now, TopByDenied, 10); len(d) != 1 || d[0].Identifier != "hot" {
		t.Fatalf("top by denied = %+v; want hot only", d)
	}
	for i := range tk.buckets {
		if len(tk.buckets[i].heap) > 8 {
			t.Fatalf("bucket %d holds %d entries, want at most 8", i, len(tk.buckets[i].heap))
		}
	}
	if later := tk.Top(now.Add(time.Minute), TopByRequests, 3); len(later) != 0 {
		t.Fatalf("a minute later: %+v; want nothing", later)
	}
	tk.Record(now.Add(59*time.Second), "hot", false)
	if got := tk.Top(now.Add(59*time.Second), TopByRequests, 1); got[0].Identifier != "hot" || got[0].Requests < 251 {
		t.Fatalf("59 s later: %+v; want hot with both buckets", got)
	}
}

// Allowed decisions are sampled one in 16 with that weight: a client's
// estimate is near its true count, its denials exact.
func testTopKeysSampled(t *testing.T) {
	tk := NewTopKeys(8)
	now := at(0)
	for range 16000 {
		tk.Record(now, "a", false)
	}
	for range 100 {
		tk.Record(now, "a", true)
	}
	got := tk.Top(now, TopByDenied, 1)
	if len(got) != 1 || got[0].Denied != 100 || got[0].Requests < 14100 || got[0].Requests > 18100 {
		t.Fatalf("top = %+v; want 100 denials exactly and about 16100 requests", got)
	}
}

// TestConcurrencyCloseTwice: a second Close gives nothing back, so another
// limiter of the same namespace keeps its store.
func TestConcurrencyCloseTwice(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, RegistryOptions{})
	limit := int64(1)
	conf := &ConcurrencyConfig{Limit: &limit, Identifier: "consumer"}
	a, err := NewConcurrency(conf, reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewConcurrency(conf, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 2 {
		if err := a.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	r := &Request{Consumer: Consumer{ID: "c-1"}, Now: at(0)}
	if res, err := b.Acquire(ctx, r); err != nil || !res.Allowed {
		t.Fatalf("Acquire after the other limiter's two Closes: %+v, %v; want allowed", res, err)
	}
	if top := b.Top(r.Now, TopByDenied, 5); top == nil {
		t.Fatal("Top: the shared top-keys list was released")
	}
}

// RecordFunc builds the key only for decisions the sketch records: every
// denial, and the allowed decisions the sample keeps.
func TestTopKeysRecordFuncBuildsOnlyRecorded(t *testing.T) {
	top := NewTopKeys(4)
	now := time.Unix(1000, 0)
	built := 0
	key := func() string { built++; return "k" }
	for range 1600 {
		top.RecordFunc(now, false, key)
	}
	allowedBuilt := built
	if allowedBuilt == 0 || allowedBuilt >= 1600 {
		t.Fatalf("1600 allowed decisions built the key %d times, want a one-in-%d sample", allowedBuilt, topSample)
	}
	for range 10 {
		top.RecordFunc(now, true, key)
	}
	if built != allowedBuilt+10 {
		t.Fatalf("10 denials built the key %d times, want 10", built-allowedBuilt)
	}
	got := top.Top(now, TopByDenied, 1)
	if len(got) != 1 || got[0].Identifier != "k" || got[0].Denied != 10 || got[0].Requests != int64(allowedBuilt)*topSample+10 {
		t.Fatalf("top: %+v, want k with 10 denied of %d", got, int64(allowedBuilt)*topSample+10)
	}
}

// A Redis-backed instance's Info names the Redis it counts in (host, port,
// database; Sentinel master and nodes; Cluster nodes), never a password.
func TestInfoNamesRedis(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "s3cret-pw"})
	reg := newRegistry(t, RegistryOptions{})
	a := newAdvanced(t, reg, `{"limit":[5],"window_size":[60],"namespace":"tgt","strategy":"redis","sync_rate":0,`+
		`"redis":{"host":"127.0.0.1","port":`+strconv.Itoa(srv.Port())+`,"database":2,"password":"s3cret-pw"}}`)
	st := a.Info().Store
	if st.Redis == nil || st.Redis.Host != "127.0.0.1" || st.Redis.Port != int64(srv.Port()) || st.Redis.Database != 2 {
		t.Fatalf("Info().Store.Redis = %+v", st.Redis)
	}
	b, _ := json.Marshal(a.Info())
	if strings.Contains(string(b), "s3cret-pw") {
		t.Fatalf("the password is in %s", b)
	}
	c := targetOf(&RedisConfig{SentinelMaster: ptr("mymaster"), SentinelNodes: []HostPort{{"10.0.0.1", 26379}}})
	k := targetOf(&RedisConfig{ClusterNodes: []ClusterNode{{"10.0.0.2", 7000}, {"::1", 7001}}})
	if fmt.Sprint(*c) != "{ 0 0 false mymaster [10.0.0.1:26379] []}" || fmt.Sprint(k.ClusterNodes) != "[10.0.0.2:7000 [::1]:7001]" {
		t.Fatalf("sentinel %+v, cluster %+v", *c, *k)
	}
}
