package policy

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// benchKeys is how many distinct clients the benchmarks spread over.
const benchKeys = 10_000

func benchIPs() []string {
	ips := make([]string, benchKeys)
	for i := range ips {
		ips[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return ips
}

// BenchmarkCheck is a full check in memory mode: identifier, two windows,
// headers. Compare with BenchmarkStoreTake, the bare store call it makes.
// Each of the 10 000 clients stays far below its limits (at most a few
// hundred calls at one instant), so every call is allowed.
func BenchmarkCheck(b *testing.B) {
	reg := NewRegistry(RegistryOptions{})
	defer reg.Close()
	cfg, err := ParseAdvanced([]byte(`{"limit":[1000,60000],"window_size":[1,60],"namespace":"bench","identifier":"ip"}`))
	if err != nil {
		b.Fatal(err)
	}
	a, err := NewAdvanced(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ips := benchIPs()
	seen := make(map[string]bool)
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := Request{ClientIP: ips[i%benchKeys], Now: now}
		res, err := a.Check(ctx, &r)
		if err != nil || !res.Allowed || len(res.Headers) != 7 {
			b.Fatalf("result %+v, %v", res, err)
		}
		if i < benchKeys {
			seen[res.Key] = true
		}
	}
	b.StopTimer()
	if b.N >= benchKeys && len(seen) != benchKeys {
		b.Fatalf("%d distinct keys used, want %d", len(seen), benchKeys)
	}
}

// BenchmarkStoreTake is the bare store call of BenchmarkCheck.
func BenchmarkStoreTake(b *testing.B) {
	s := memorystore.New(memorystore.Options{})
	defer s.Close()
	limits := []ratelimit.Limit{ratelimit.Every(1000, time.Second), ratelimit.Every(60000, time.Minute)}
	ips := benchIPs()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d, err := s.Take(ctx, ratelimit.Request{Key: ips[i%benchKeys], Limits: limits, Now: now, Penalty: true})
		if err != nil || !d.Allowed {
			b.Fatalf("decision %+v, %v", d, err)
		}
	}
}

// BenchmarkCheckAppend is BenchmarkCheck with a reused header buffer, as
// a proxy that keeps one per connection would call it.
func BenchmarkCheckAppend(b *testing.B) {
	a := benchAdvanced(b, RegistryOptions{})
	ips := benchIPs()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	buf := make([]Header, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := Request{ClientIP: ips[i%benchKeys], Now: now}
		res, err := a.CheckAppend(ctx, &r, buf[:0])
		if err != nil || !res.Allowed || len(res.Headers) != 7 || res.Key != ips[i%benchKeys] {
			b.Fatalf("result %+v, %v", res, err)
		}
	}
}

// BenchmarkCheckAppendNoTop is BenchmarkCheckAppend without the top-list
// sketch (RegistryOptions.TopKeys < 0): the difference is the sketch's
// cost, here at its worst, every call a client the sketch does not hold
// (10 000 clients, 128 tracked). The loop is repeated, not shared: the
// instruction counter (bench/instructions.sh) counts inside the
// benchmark function itself.
func BenchmarkCheckAppendNoTop(b *testing.B) {
	a := benchAdvanced(b, RegistryOptions{TopKeys: -1})
	ips := benchIPs()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	buf := make([]Header, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := Request{ClientIP: ips[i%benchKeys], Now: now}
		res, err := a.CheckAppend(ctx, &r, buf[:0])
		if err != nil || !res.Allowed || len(res.Headers) != 7 || res.Key != ips[i%benchKeys] {
			b.Fatalf("result %+v, %v", res, err)
		}
	}
}

// benchAdvanced compiles the benchmarks' two-window limiter, closed with b.
func benchAdvanced(b *testing.B, opts RegistryOptions) *Advanced {
	reg := NewRegistry(opts)
	b.Cleanup(func() { _ = reg.Close() })
	cfg, err := ParseAdvanced([]byte(`{"limit":[1000,60000],"window_size":[1,60],"namespace":"bench","identifier":"ip"}`))
	if err != nil {
		b.Fatal(err)
	}
	a, err := NewAdvanced(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a
}

// BenchmarkCheckAppendQuota is BenchmarkCheckAppend with every request
// carrying a quota override of two windows (one of 16 distinct quotas, as
// a few tenants with overrides would): the quota's plan comes from the
// limiter's cache.
func BenchmarkCheckAppendQuota(b *testing.B) {
	reg := NewRegistry(RegistryOptions{})
	defer reg.Close()
	cfg, err := ParseAdvanced([]byte(`{"limit":[10],"window_size":[60],"namespace":"bench","identifier":"ip"}`))
	if err != nil {
		b.Fatal(err)
	}
	a, err := NewAdvanced(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	quotas := make([]Quota, 16)
	for i := range quotas {
		quotas[i] = Quota{Limits: []ratelimit.Limit{ratelimit.Every(int64(1000+i), time.Second), ratelimit.Every(60000, time.Minute)}}
	}
	ips := benchIPs()
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	buf := make([]Header, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		q := i % benchKeys % len(quotas) // one quota per client
		r := Request{ClientIP: ips[i%benchKeys], Now: now, Quota: quotas[q]}
		res, err := a.CheckAppend(ctx, &r, buf[:0])
		if err != nil || !res.Allowed || len(res.Headers) != 7 || res.Limit != int64(1000+q) {
			b.Fatalf("result %+v, %v", res, err)
		}
	}
}

// BenchmarkCheckAppendDenied is a denied check (one client over a limit
// of one per hour), each one recorded in the top list;
// BenchmarkCheckAppendDeniedNoTop the same without the sketch.
func BenchmarkCheckAppendDenied(b *testing.B) {
	a := benchDenied(b, RegistryOptions{})
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	buf := make([]Header, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := Request{ClientIP: "10.9.9.9", Now: now}
		if res, err := a.CheckAppend(ctx, &r, buf[:0]); err != nil || res.Allowed {
			b.Fatalf("result %+v, %v", res, err)
		}
	}
}

func BenchmarkCheckAppendDeniedNoTop(b *testing.B) {
	a := benchDenied(b, RegistryOptions{TopKeys: -1})
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	buf := make([]Header, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := Request{ClientIP: "10.9.9.9", Now: now}
		if res, err := a.CheckAppend(ctx, &r, buf[:0]); err != nil || res.Allowed {
			b.Fatalf("result %+v, %v", res, err)
		}
	}
}

func benchDenied(b *testing.B, opts RegistryOptions) *Advanced {
	reg := NewRegistry(opts)
	b.Cleanup(func() { _ = reg.Close() })
	cfg, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[3600],"namespace":"bench-denied","identifier":"ip","disable_penalty":true}`))
	if err != nil {
		b.Fatal(err)
	}
	a, err := NewAdvanced(cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	r := Request{ClientIP: "10.9.9.9", Now: time.Unix(1_700_000_000, 0)}
	if _, err := a.Check(context.Background(), &r); err != nil {
		b.Fatal(err)
	}
	return a
}
