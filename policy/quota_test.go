package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

func quota(alg ratelimit.Algorithm, set bool, pairs ...int64) Quota {
	q := Quota{WindowTypeSet: set}
	for i := 0; i+1 < len(pairs); i += 2 {
		q.Limits = append(q.Limits, ratelimit.Limit{Algorithm: alg, Count: pairs[i], Window: time.Duration(pairs[i+1]) * time.Second})
	}
	return q
}

// A quota replaces the plugin's limits and windows for the requests that
// carry it; the headers name the quota's windows. Requests without it keep
// the plugin's.
func TestQuotaReplacesLimits(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[2],"window_size":[60],"window_type":"fixed","namespace":"q","identifier":"ip"}`)
	acme := Request{ClientIP: "10.0.0.1", Quota: quota(ratelimit.SlidingWindow, false, 3, 10, 5, 3600)}
	runCalls(t, a, []call{
		{t: 0, req: acme, allowed: true, headers: want{"X-RateLimit-Limit-10": "3", "X-RateLimit-Remaining-10": "2",
			"X-RateLimit-Limit-Hour": "5", "X-RateLimit-Remaining-Hour": "4", "X-RateLimit-Limit-Minute": "-", "RateLimit-Limit": "3"}},
		{t: time.Second, req: acme, repeat: 1, allowed: true, headers: want{"X-RateLimit-Remaining-10": "0", "X-RateLimit-Remaining-Hour": "2"}},
		// Fixed, as the plugin's window_type: the 10 s window is full.
		{t: 2 * time.Second, req: acme, allowed: false, headers: want{"Retry-After": "8", "RateLimit-Reset": "8"}},
		// The next 10 s window (fixed: no weight of the previous one).
		{t: 10 * time.Second, req: acme, allowed: true, headers: want{"X-RateLimit-Remaining-10": "2", "X-RateLimit-Remaining-Hour": "1"}},
		// Another client without the quota: the plugin's limits.
		{t: 10 * time.Second, req: Request{ClientIP: "10.0.0.2"}, repeat: 1, allowed: true,
			headers: want{"X-RateLimit-Limit-Minute": "2", "X-RateLimit-Remaining-Minute": "0", "X-RateLimit-Limit-10": "-"}},
	})
}

// A quota naming its window type uses it instead of the plugin's.
func TestQuotaWindowType(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[100],"window_size":[60],"window_type":"fixed","namespace":"q","identifier":"ip"}`)
	sliding := Request{Quota: quota(ratelimit.SlidingWindow, true, 10, 60)}
	// Ten hits in the first minute; 30 s into the next one the previous
	// window weighs 0.5 (sliding): 5 + 1.
	runCalls(t, a, []call{
		{t: 0, req: sliding, repeat: 9, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "0"}},
		{t: 90 * time.Second, req: sliding, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "4"}},
	})
	fixed := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[100],"window_size":[60],"namespace":"q","identifier":"ip"}`)
	q := Request{Quota: quota(ratelimit.FixedWindow, true, 10, 60)}
	runCalls(t, fixed, []call{
		{t: 0, req: q, repeat: 9, allowed: true},
		{t: 90 * time.Second, req: q, allowed: true, headers: want{"X-RateLimit-Remaining-Minute": "9"}},
	})
}

// An invalid quota is not applied: the request is decided on the plugin's
// limits, and the error says why.
func TestQuotaInvalid(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5],"window_size":[60],"namespace":"q","identifier":"ip"}`)
	for name, q := range map[string]Quota{
		"fractional window": {Limits: []ratelimit.Limit{{Count: 3, Window: 1500 * time.Millisecond}}},
		"zero count":        {Limits: []ratelimit.Limit{{Count: 0, Window: time.Second}}},
		"mixed types":       {WindowTypeSet: true, Limits: []ratelimit.Limit{{Count: 3, Window: time.Second}, {Algorithm: ratelimit.FixedWindow, Count: 9, Window: time.Minute}}},
		"token bucket":      {WindowTypeSet: true, Limits: []ratelimit.Limit{{Algorithm: ratelimit.TokenBucket, Count: 3, Window: time.Second}}},
	} {
		r := Request{ClientIP: "10.0.0.1", Now: at(0), Quota: q}
		res, err := a.Check(context.Background(), &r)
		if !errors.Is(err, ErrInvalidQuota) {
			t.Errorf("%s: error %v, want ErrInvalidQuota", name, err)
		}
		if v, _ := hdr(res, "X-RateLimit-Limit-Minute"); !res.Allowed || v != "5" {
			t.Errorf("%s: %+v, want allowed on the plugin's limits", name, res)
		}
	}
}

// A legacy consumer-group override applying to the consumer wins over a
// quota; a consumer outside the groups gets the quota.
func TestQuotaUnderGroupOverride(t *testing.T) {
	cfg, err := ParseAdvanced([]byte(`{"limit":[5],"window_size":[60],"namespace":"q","identifier":"consumer","enforce_consumer_groups":true,"consumer_groups":["gold"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Overrides = map[string]*OverrideConfig{"gold": {Limit: []int64{50}, WindowSize: []int64{60}, WindowType: WindowSliding}}
	a, err := NewAdvanced(cfg, newRegistry(t, RegistryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	q := quota(ratelimit.SlidingWindow, false, 7, 3600)
	runCalls(t, a, []call{
		{t: 0, req: Request{Consumer: Consumer{ID: "c1"}, Groups: []Group{{Name: "gold"}}, Quota: q}, allowed: true,
			headers: want{"X-RateLimit-Limit-Minute": "50", "X-RateLimit-Limit-Hour": "-"}},
		{t: 0, req: Request{Consumer: Consumer{ID: "c2"}, Groups: []Group{{Name: "silver"}}, Quota: q}, allowed: true,
			headers: want{"X-RateLimit-Limit-Hour": "7", "X-RateLimit-Limit-Minute": "-"}},
	})
}

// Quota plans are compiled once per distinct quota, up to maxQuotaPlans;
// beyond the cap they are compiled per request and decide the same.
func TestQuotaPlanCache(t *testing.T) {
	a := newAdvanced(t, newRegistry(t, RegistryOptions{}), `{"limit":[5],"window_size":[60],"namespace":"q","identifier":"ip"}`)
	for i := range maxQuotaPlans + 10 {
		r := Request{ClientIP: "10.0.0.1", Now: at(0), Quota: quota(ratelimit.SlidingWindow, false, int64(i+1), 60)}
		res, err := a.Check(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Limit != int64(i+1) {
			t.Fatalf("quota %d: limit %d", i+1, res.Limit)
		}
	}
	a.quotaMu.RLock()
	n := len(a.quotaPlans)
	a.quotaMu.RUnlock()
	if n != maxQuotaPlans {
		t.Errorf("%d cached quota plans, want %d", n, maxQuotaPlans)
	}
	r := Request{ClientIP: "10.0.0.3", Now: at(0), Quota: quota(ratelimit.SlidingWindow, false, 9, 60)}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = a.Check(context.Background(), &r) }); allocs > 4 {
		t.Errorf("%v allocations per check with a cached quota plan", allocs)
	}
}
