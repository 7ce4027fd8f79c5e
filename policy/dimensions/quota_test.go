package dimensions

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

const tenantCfg = `{"key_prefix":"biz","dimensions":[
	{"name":"tenant","type":"header","header":"X-Tenant"},
	{"type":"method"}],
 "overrides":[
	{"dimension":"tenant","value":"acme","limit":[1000],"window_size":[60]},
	{"dimension":"method","value":"DELETE","limit":[1],"window_size":[1],"window_type":"fixed"},
	{"values":["acme","DELETE"],"limit":[100,5],"window_size":[3600,1]}]}`

func req(tenant, method string) *Input {
	in := &Input{Method: method}
	in.SetHeader("x-tenant", tenant)
	return in
}

func TestResolveInlineOverrides(t *testing.T) {
	b := mustNew(t, tenantCfg, Options{})
	tests := []struct {
		tenant, method string
		by             string
		limits         string
		overridden     bool
	}{
		{"acme", "GET", "tenant", "1000/1m0s sliding", true},
		{"globex", "DELETE", "method", "1/1s fixed", true},
		// The composite key wins over both per-dimension overrides, and its
		// pairs are sorted by ascending limit as Kong stores them.
		{"acme", "DELETE", "", "5/1s sliding,100/1h0m0s sliding", true},
		{"globex", "GET", "", "", false},
	}
	for _, tt := range tests {
		r := b.Resolve(req(tt.tenant, tt.method))
		if !r.OK || r.Key != ratelimit.Key("biz", tt.tenant, tt.method) {
			t.Fatalf("%s %s: key %q, %v", tt.tenant, tt.method, r.Key, r.OK)
		}
		var ls []string
		for _, l := range r.Quota.Limits {
			ls = append(ls, l.String())
		}
		if r.Overridden != tt.overridden || r.By != tt.by || strings.Join(ls, ",") != tt.limits {
			t.Errorf("%s %s: Resolve = %+v (%s), want by %q limits %q", tt.tenant, tt.method, r, strings.Join(ls, ","), tt.by, tt.limits)
		}
	}
	if r := b.Resolve(&Input{Method: "GET"}); r.OK || r.Overridden {
		t.Fatalf("missing tenant: Resolve = %+v, want no key", r)
	}
}

func TestLiveOverridesSwap(t *testing.T) {
	var live Overrides
	b1 := mustNew(t, tenantCfg, Options{Overrides: &live})
	if r := b1.Resolve(req("acme", "GET")); r.Quota.Limits[0].Count != 1000 {
		t.Fatalf("before any table: %+v", r)
	}
	tbl, err := ParseOverrides([]byte(`{"overrides":[{"dimension":"tenant","value":"globex","limit":[50],"window_size":[1]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Check(tbl); err != nil {
		t.Fatal(err)
	}
	live.Store(tbl)
	// The live table replaces the inline overrides as a whole.
	if r := b1.Resolve(req("acme", "GET")); r.Overridden {
		t.Fatalf("acme after swap: %+v", r)
	}
	// A Builder of the next config generation shares the holder.
	b2 := mustNew(t, tenantCfg, Options{Overrides: &live})
	for _, b := range []*Builder{b1, b2} {
		if r := b.Resolve(req("globex", "GET")); !r.Overridden || r.Quota.Limits[0] != ratelimit.PerSecond(50) || r.Quota.AlgorithmSet {
			t.Fatalf("globex after swap: %+v", r)
		}
	}
	live.Store(nil)
	if r := b1.Resolve(req("acme", "GET")); r.Quota.Limits[0].Count != 1000 {
		t.Fatalf("after removing the table: %+v", r)
	}
}

func TestCheckTable(t *testing.T) {
	b := mustNew(t, tenantCfg, Options{})
	tbl, err := ParseOverrides([]byte(`{"overrides":[
		{"dimension":"plan","value":"gold","limit":[1],"window_size":[1]},
		{"values":["a","b","c"],"limit":[1],"window_size":[1]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	err = b.Check(tbl)
	want := "dimensions: invalid config: overrides: dimension 'plan' is not in the config (have: tenant, method); " +
		"overrides: composite override with 3 values; the config has 2 dimensions"
	if err == nil || err.Error() != want || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Check = %v\nwant    %s", err, want)
	}
	if err := b.Check(nil); err != nil {
		t.Fatal(err)
	}
	_, err = Parse([]byte(`{"dimensions":[{"type":"ip"}],"overrides":[{"dimension":"tenant","value":"x","limit":[1],"window_size":[1]}]}`))
	if err == nil || !strings.Contains(err.Error(), "dimension 'tenant' is not in the config (have: ip)") {
		t.Fatalf("Parse = %v", err)
	}
}

func TestParseOverridesDocuments(t *testing.T) {
	a := []byte(`{"overrides":[{"dimension":"tenant","value":"acme","limit":[10],"window_size":[1]}]}`)
	bdoc := []byte(`{"overrides":[{"dimension":"tenant","value":"globex","limit":[20],"window_size":[0.5]},
		{"dimension":"tenant","value":"acme","limit":[30],"window_size":[1]}]}`)
	_, err := ParseOverrides(a, bdoc)
	want := "dimensions: invalid config: documents[1].overrides[1]: duplicated override for dimension 'tenant' value 'acme'"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	tbl, err := ParseOverrides(a, []byte(`{"overrides":[]}`))
	if err != nil || tbl.Len() != 1 {
		t.Fatalf("ParseOverrides = %v, %v", tbl, err)
	}
	if q, ok := tbl.Lookup("tenant", "acme"); !ok || q.Limits[0] != ratelimit.PerSecond(10) {
		t.Fatalf("Lookup = %+v, %v", q, ok)
	}
	_, err = ParseOverrides([]byte(`{"items":[]}`))
	if err == nil || err.Error() != "dimensions: invalid config: overrides: required field missing; items: unknown field" {
		t.Fatalf("error = %v", err)
	}
	tbl, err = ParseOverrides([]byte(`{"overrides":[{"values":["x","y"],"limit":[3],"window_size":[0.25]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := tbl.LookupValues("x", "y"); !ok || q.Limits[0] != ratelimit.Every(3, 250*time.Millisecond) {
		t.Fatalf("LookupValues = %+v, %v", q, ok)
	}
	var nilTable *Table
	if nilTable.Len() != 0 || nilTable.Dimensions() != nil {
		t.Fatal("nil table not empty")
	}
	if _, ok := nilTable.Lookup("a", "b"); ok {
		t.Fatal("nil table hit")
	}
}

func TestAppendLimits(t *testing.T) {
	q := Quota{Limits: []ratelimit.Limit{ratelimit.PerSecond(5), ratelimit.PerHour(100)}}
	got := q.AppendLimits(nil, ratelimit.FixedWindow)
	if got[0] != ratelimit.PerSecond(5).Fixed() || got[1] != ratelimit.PerHour(100).Fixed() {
		t.Fatalf("AppendLimits = %v", got)
	}
	q.AlgorithmSet = true
	if got := q.AppendLimits(got[:0], ratelimit.FixedWindow); got[0] != ratelimit.PerSecond(5) {
		t.Fatalf("AppendLimits with window_type = %v", got)
	}
	dst := make([]ratelimit.Limit, 0, 4)
	if n := testing.AllocsPerRun(100, func() { dst = q.AppendLimits(dst[:0], ratelimit.SlidingWindow) }); n != 0 {
		t.Fatalf("AppendLimits allocates %v times", n)
	}
}

// The override lookup adds no allocation to building the key: Resolve
// allocates exactly what Key does, and Table.Lookup nothing.
func TestOverrideLookupDoesNotAllocate(t *testing.T) {
	var live Overrides
	b := mustNew(t, tenantCfg, Options{Overrides: &live})
	in := req("acme", "GET")
	keyAllocs := testing.AllocsPerRun(200, func() { b.Key(in) })
	for _, name := range []string{"inline", "live"} {
		if name == "live" {
			tbl, err := ParseOverrides([]byte(`{"overrides":[{"dimension":"tenant","value":"acme","limit":[1],"window_size":[1]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			live.Store(tbl)
		}
		var r Result
		n := testing.AllocsPerRun(200, func() { r = b.Resolve(in) })
		if !r.Overridden {
			t.Fatalf("%s: no hit", name)
		}
		if n != keyAllocs {
			t.Fatalf("%s: Resolve allocates %v times, Key %v", name, n, keyAllocs)
		}
	}
	tbl := live.Load()
	if n := testing.AllocsPerRun(200, func() { tbl.Lookup("tenant", "acme") }); n != 0 {
		t.Fatalf("Lookup allocates %v times", n)
	}
}

func BenchmarkResolve(b *testing.B) {
	var live Overrides
	bl := mustNew(b, `{"dimensions":[{"name":"tenant","type":"header","header":"X-Tenant"},{"type":"method"},{"type":"path_segment","index":0}]}`, Options{Overrides: &live})
	const tenants = 100000
	var sb strings.Builder
	sb.WriteString(`{"overrides":[`)
	for i := range tenants {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"dimension":"tenant","value":"t` + strconv.Itoa(i) + `","limit":[` + strconv.Itoa(i+1) + `],"window_size":[60]}`)
	}
	sb.WriteString(`]}`)
	tbl, err := ParseOverrides([]byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	if tbl.Len() != tenants {
		b.Fatalf("table holds %d overrides, want %d", tbl.Len(), tenants)
	}
	live.Store(tbl)
	inputs := make([]*Input, 1024)
	for i := range inputs {
		in := &Input{Method: "GET", Path: "/api/orders"}
		in.SetHeader("x-tenant", "t"+strconv.Itoa(i*97%tenants))
		inputs[i] = in
	}
	b.ReportAllocs()
	b.ResetTimer()
	hits := 0
	for i := 0; i < b.N; i++ {
		if bl.Resolve(inputs[i%len(inputs)]).Overridden {
			hits++
		}
	}
	if hits != b.N {
		b.Fatalf("%d hits of %d", hits, b.N)
	}
}

// Requests resolve while the config centre swaps tables: every result is
// one of the tables' quotas, never a torn one (run with -race).
func TestConcurrentResolveAndSwap(t *testing.T) {
	var live Overrides
	b := mustNew(t, tenantCfg, Options{Overrides: &live})
	tables := make([]*Table, 2)
	for i := range tables {
		tbl, err := ParseOverrides([]byte(`{"overrides":[{"dimension":"tenant","value":"acme","limit":[` + strconv.Itoa(i+1) + `],"window_size":[1]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		tables[i] = tbl
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			in := req("acme", "GET")
			for range 2000 {
				r := b.Resolve(in)
				if n := r.Quota.Limits[0].Count; n != 1 && n != 2 && n != 1000 {
					t.Errorf("count %d", n)
					return
				}
			}
		})
	}
	for i := range 2000 {
		live.Store(tables[i%2])
	}
	wg.Wait()
}

func TestZeroBuilder(t *testing.T) {
	var b Builder
	if r := b.Resolve(&Input{}); r.OK || r.Overridden {
		t.Fatalf("zero Builder: %+v", r)
	}
}
