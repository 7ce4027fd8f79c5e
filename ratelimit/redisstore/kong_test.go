package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

func TestKongLayoutSynchronous(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "my-ns", KongLayout: true, ManualSync: true})
	now := ratelimittest.At(90 * time.Second) // 30 s into the window starting at t0+60s
	hash := strconv.FormatInt(ratelimittest.At(60*time.Second).Unix(), 10) + ":60:my-ns"
	prevHash := strconv.FormatInt(ratelimittest.T0.Unix(), 10) + ":60:my-ns"
	fixed := ratelimit.Request{Key: "consumer-1", Limits: []ratelimit.Limit{ratelimit.PerMinute(5).Fixed()}, Now: now}
	for range 3 {
		if d := take(t, s, fixed); !d.Allowed {
			t.Fatal("denied under the limit")
		}
	}
	if got := srv.Do(t, "HGET", hash, "consumer-1"); got != "3" {
		t.Fatalf("HGET %s = %v, want 3", hash, got)
	}
	if ttl, _ := srv.Do(t, "TTL", hash).(int64); ttl <= 60 || ttl > 120 {
		t.Fatalf("TTL %d s, want 2 windows", ttl)
	}
	// A Kong node counts two hits in the same hash.
	srv.Do(t, "HINCRBY", hash, "consumer-1", "2")
	if d := take(t, s, fixed); d.Allowed {
		t.Fatal("allowed past hits counted by a Kong node")
	}
	if got := srv.Do(t, "HGET", hash, "consumer-1"); got != "5" {
		t.Fatalf("after an all-or-nothing denial HGET = %v, want 5 (taken back)", got)
	}
	fixed.Penalty = true
	take(t, s, fixed)
	if got := srv.Do(t, "HGET", hash, "consumer-1"); got != "6" {
		t.Fatalf("after a penalty denial HGET = %v, want 6 (kept)", got)
	}

	// The sliding formula reads the previous window Kong wrote: 30 s into
	// the window, 10 previous hits weigh 5.
	srv.Do(t, "HSET", prevHash, "consumer-2", "10")
	sliding := ratelimit.Request{Key: "consumer-2", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)}, Now: now}
	for i := range 5 {
		if d := take(t, s, sliding); !d.Allowed {
			t.Fatalf("call %d denied: rate %v", i, d.State(0).Used)
		}
	}
	if d := take(t, s, sliding); d.Allowed || d.State(0).Used != 11 {
		t.Fatalf("sixth call: allowed %v used %v, want denied at 11", d.Allowed, d.State(0).Used)
	}

	bucket := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(5).TokenBucket(0)}, Now: now}
	if _, err := s.Take(context.Background(), bucket); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Fatalf("token bucket in Kong's layout: %v", err)
	}
}

func TestKongLayoutExactness(t *testing.T) {
	_, c := standalone(t)
	stores := make([]*Store, nodes)
	for i := range stores {
		stores[i] = newStore(t, c, Options{Namespace: "kong-exact", KongLayout: true, ManualSync: true, Timeout: 10 * time.Second, Strict: true})
	}
	lim := []ratelimit.Limit{ratelimit.PerMinute(1000).Fixed()}
	now := ratelimittest.At(30 * time.Second)
	got := hammer(t, stores, 6, func(s *Store, _, _ int) (bool, error) {
		d, err := s.Take(context.Background(), ratelimit.Request{Key: "k", Limits: lim, Now: now})
		return d.Allowed, err
	})
	if got != 1000 {
		t.Fatalf("%d admitted, want exactly 1000", got)
	}
}

func TestKongLayoutPeriodic(t *testing.T) {
	srv, c := standalone(t)
	opts := Options{Namespace: "kp", KongLayout: true, ManualSync: true, SyncRate: time.Second}
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	ctx := context.Background()
	now := ratelimittest.At(10 * time.Second)
	r := ratelimit.Request{Key: "ip-1", Limits: []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}, Now: now}
	for range 4 {
		take(t, a, r)
	}
	take(t, b, r)
	srv.Do(t, "HINCRBY", strconv.FormatInt(ratelimittest.T0.Unix(), 10)+":60:kp", "ip-1", "2") // a Kong node
	for _, s := range []*Store{a, b, a} {
		if err := s.Sync(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*Store{"a": a, "b": b} {
		if d := take(t, s, r); d.State(0).Remaining != 2 {
			t.Fatalf("node %s: remaining %d, want 2 (4+1 sluice hits, 2 Kong hits, this call)", name, d.State(0).Remaining)
		}
	}
}

func TestKongLayoutCluster(t *testing.T) {
	// Kong's hashes of one decision sit in different slots (one per
	// window): the commands go out in one pipeline that the client splits
	// by node, and the windows still count exactly.
	_, c := cluster(t)
	a := newStore(t, c, Options{Namespace: "kc", KongLayout: true, ManualSync: true, Strict: true})
	b := newStore(t, c, Options{Namespace: "kc", KongLayout: true, ManualSync: true, Strict: true})
	lims := []ratelimit.Limit{ratelimit.PerMinute(3).Fixed(), ratelimit.PerHour(4).Fixed()}
	now := ratelimittest.At(30 * time.Second)
	want := []bool{true, true, true, false}
	for i, s := range []*Store{a, b, a, b} {
		d := take(t, s, ratelimit.Request{Key: "u", Limits: lims, Now: now})
		if d.Allowed != want[i] {
			t.Fatalf("call %d: allowed %v, want %v", i, d.Allowed, want[i])
		}
	}
	// Next minute: the minute window is fresh, the hour has 3 of 4.
	now = now.Add(time.Minute)
	for i, w := range []bool{true, false} {
		if d := take(t, a, ratelimit.Request{Key: "u", Limits: lims, Now: now}); d.Allowed != w {
			t.Fatalf("next minute, call %d: allowed %v, want %v", i, d.Allowed, w)
		}
	}
}
