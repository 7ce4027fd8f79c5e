package memorystore

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

var ctx = context.Background()

func TestConformance(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Store { return New(Options{}) })
}

// A Limiter's calls over the store (Limiter.Allow on the store's
// allow-only path, with the Limiter's clock) decide every timeline as Take.
func TestConformanceLimiter(t *testing.T) {
	ratelimittest.RunLimiter(t, func(t *testing.T) ratelimit.Store { return New(Options{}) })
}

// With one shard every key contends for one lock, and a tiny MaxKeys makes
// every new key evict: the suite must still pass, since its timelines never
// hold more live keys than the bound.
func TestConformanceOneShard(t *testing.T) {
	ratelimittest.Run(t, func(t *testing.T) ratelimit.Store { return New(Options{Shards: 1, MaxKeys: 64}) })
}

func TestHammerHard(t *testing.T) {
	s := New(Options{Shards: 4})
	defer s.Close()
	ratelimittest.Hammer(t, s, ratelimittest.HammerOptions{Goroutines: 16, Calls: 60, Phases: 10})
}

func take(t *testing.T, s *Store, key string, l ratelimit.Limit, at time.Duration) ratelimit.Decision {
	t.Helper()
	d, err := s.Take(ctx, ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}, Now: ratelimittest.At(at)})
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return d
}

func TestTakeOnExistingKeyDoesNotAllocate(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	for _, ls := range [][]ratelimit.Limit{
		{ratelimit.PerSecond(1 << 40)},
		{ratelimit.PerSecond(1 << 40).Fixed(), ratelimit.PerMinute(1 << 40), ratelimit.PerHour(1 << 31).TokenBucket(0)},
	} {
		r := ratelimit.Request{Key: "user:42", Limits: ls}
		if _, err := s.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := s.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%d limits: %.1f allocations per Take, want 0", len(ls), allocs)
		}
	}
}

// The sweeper drops a counter once it can no longer affect a decision (two
// windows after its last window started) and a lease set once its leases
// have lapsed, on its own schedule, and stops with Close.
func TestSweeperDropsDeadEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Options{SweepInterval: time.Minute})
		defer s.Close()
		start := time.Now().Truncate(time.Minute)
		time.Sleep(time.Until(start.Add(time.Minute))) // to a minute's edge
		r := ratelimit.Request{Key: "idle", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)}}
		if _, err := s.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "conn", ID: "a", Max: 1, TTL: 90 * time.Second}); err != nil {
			t.Fatal(err)
		}
		wantLen := func(when string, n int) {
			t.Helper()
			synctest.Wait()
			if got := s.Len(); got != n {
				t.Fatalf("%s: %d entries, want %d", when, got, n)
			}
		}
		wantLen("at once", 2)
		time.Sleep(time.Minute)
		wantLen("after one sweep", 2) // the counter still weighs on the next window
		time.Sleep(time.Minute)
		wantLen("after two sweeps", 0)
	})
}

func TestSweeperStopsWithClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Options{SweepInterval: time.Second})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		// synctest.Test fails if the sweeper outlives the bubble.
	})
}

func TestClosedStoreReturnsErrClosed(t *testing.T) {
	s := New(Options{})
	s.Close()
	_, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(1)}})
	if !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
	_, err = s.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: "a", Max: 1, TTL: time.Second})
	if !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := s.Release(ctx, "k", "a"); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
}

// A full shard first drops dead counters: live ones keep their counts.
func TestEvictionDropsDeadCountersFirst(t *testing.T) {
	s := New(Options{Shards: 1, MaxKeys: 4, SweepInterval: -1})
	defer s.Close()
	perSec := ratelimit.PerSecond(1).Fixed()
	perHour := ratelimit.PerHour(1).Fixed()
	take(t, s, "dead1", perSec, 0)
	take(t, s, "dead2", perSec, 0)
	take(t, s, "live1", perHour, 0)
	take(t, s, "live2", perHour, 0)
	take(t, s, "new", perHour, time.Minute) // the per-second counters died at 2 s
	if n := s.Len(); n != 3 {
		t.Errorf("%d entries after eviction, want 3 (two dead dropped, one added)", n)
	}
	for _, k := range []string{"live1", "live2", "new"} {
		if d := take(t, s, k, perHour, time.Minute); d.Allowed {
			t.Errorf("%s was forgotten: a second call in its hour is allowed", k)
		}
	}
}

// With no dead counter, a full shard evicts the counter that would die
// first, and that key starts over.
func TestEvictionDropsNearestExpiry(t *testing.T) {
	s := New(Options{Shards: 1, MaxKeys: 3, SweepInterval: -1})
	defer s.Close()
	take(t, s, "hour", ratelimit.PerHour(1).Fixed(), 0)
	take(t, s, "minute", ratelimit.PerMinute(1).Fixed(), 0)
	take(t, s, "day", ratelimit.PerDay(1).Fixed(), 0)
	take(t, s, "new", ratelimit.PerDay(1).Fixed(), time.Second)
	if d := take(t, s, "hour", ratelimit.PerHour(1).Fixed(), 2*time.Second); d.Allowed {
		t.Error(`"hour" was evicted; it dies later than "minute"`)
	}
	if d := take(t, s, "minute", ratelimit.PerMinute(1).Fixed(), 3*time.Second); !d.Allowed {
		t.Error(`"minute" was not the one evicted`)
	}
}

// Live leases are never evicted: a shard full of them refuses new keys
// until they lapse.
func TestShardFullOfLiveLeases(t *testing.T) {
	s := New(Options{Shards: 1, MaxKeys: 2, SweepInterval: -1})
	defer s.Close()
	for _, k := range []string{"a", "b"} {
		l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: k, ID: "x", Max: 1, TTL: time.Minute, Now: ratelimittest.At(0)})
		if err != nil || !l.Allowed {
			t.Fatalf("Acquire(%s): %+v, %v", k, l, err)
		}
	}
	r := ratelimit.Request{Key: "c", Limits: []ratelimit.Limit{ratelimit.PerSecond(1)}, Now: ratelimittest.At(time.Second)}
	if _, err := s.Take(ctx, r); !errors.Is(err, ratelimit.ErrStoreFull) {
		t.Fatalf("Take with a shard full of live leases: %v, want ErrStoreFull", err)
	}
	r.Now = ratelimittest.At(time.Minute)
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("Take once the leases lapsed: %v, %v", d.Allowed, err)
	}
}

func TestShardsDoNotShareCacheLines(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size%128 != 0 {
		t.Errorf("shard is %d bytes, want a multiple of 128", size)
	}
}

func TestOptionsDefaults(t *testing.T) {
	s := New(Options{SweepInterval: -1})
	defer s.Close()
	if len(s.shards) != defaultShards || s.perShard != defaultMaxKeys/defaultShards+1 {
		t.Errorf("shards %d, per shard %d", len(s.shards), s.perShard)
	}
	s2 := New(Options{MaxKeys: 10, Shards: 100, SweepInterval: -1})
	defer s2.Close()
	if len(s2.shards) != 16 || s2.perShard != 1 {
		t.Errorf("MaxKeys 10, Shards 100: %d shards of %d, want 16 of 1", len(s2.shards), s2.perShard)
	}
}

// The sweeper locks one shard at a time: while it waits for a busy shard,
// the shards it has swept are free for decisions. (Were it to hold them,
// this test would hang and fail on the test timeout.)
func TestSweeperNeverStopsTheWorld(t *testing.T) {
	const shards = 4
	s := New(Options{Shards: shards, SweepInterval: -1})
	defer s.Close()
	// One dead counter in every shard: a per-second counter from t0,
	// swept at t0+1m.
	keyIn := make([]string, shards)
	for i, filled := 0, 0; filled < shards; i++ {
		k := "k" + strconv.Itoa(i)
		h1, _ := s.keyHash(k)
		if n := h1 & s.mask; keyIn[n] == "" {
			keyIn[n] = k
			take(t, s, k, ratelimit.PerSecond(1), 0)
			filled++
		}
	}
	entries := func(i int) int {
		sh := &s.shards[i]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.live
	}

	last := &s.shards[shards-1]
	last.mu.Lock() // a decision in progress on the last shard
	swept := make(chan struct{})
	go func() {
		s.sweep(ratelimittest.At(time.Minute).UnixNano())
		close(swept)
	}()
	for i := 0; i < shards-1; {
		if entries(i) == 0 {
			i++
		} else {
			runtime.Gosched()
		}
	}
	// The sweeper is past shards 0..2 and waits for the last one.
	if d := take(t, s, keyIn[0], ratelimit.PerSecond(1), time.Minute); !d.Allowed {
		t.Error("decision on a swept shard denied")
	}
	last.mu.Unlock()
	<-swept
	if n := entries(shards - 1); n != 0 {
		t.Errorf("last shard holds %d entries after the sweep, want 0", n)
	}
}

// A shard's table keeps every counter through its growth, through drops
// (which leave tombstones) and through the rebuild of a sweep that left it
// mostly tombstones, which also shrinks it.
func TestTableKeepsCountersThroughGrowthAndSweeps(t *testing.T) {
	s := New(Options{Shards: 1, SweepInterval: -1})
	defer s.Close()
	sh := &s.shards[0]
	const n = 1000
	for i := range n {
		take(t, s, "live"+strconv.Itoa(i), ratelimit.PerHour(1).Fixed(), 0)
		take(t, s, "dead"+strconv.Itoa(i), ratelimit.PerSecond(1).Fixed(), 0)
	}
	if sh.live != 2*n || len(sh.tab) != 4096 {
		t.Fatalf("%d counters in a table of %d, want %d in 4096 (doubled when 3/4 full)", sh.live, len(sh.tab), 2*n)
	}
	s.sweep(ratelimittest.At(time.Minute).UnixNano())
	if sh.live != n || len(sh.tab) != 2048 {
		t.Fatalf("after the sweep: %d counters in a table of %d, want %d in 2048", sh.live, len(sh.tab), n)
	}
	for i := range n {
		if d := take(t, s, "live"+strconv.Itoa(i), ratelimit.PerHour(1).Fixed(), time.Minute); d.Allowed {
			t.Fatalf("live%d lost its count", i)
		}
		if d := take(t, s, "dead"+strconv.Itoa(i), ratelimit.PerSecond(1).Fixed(), time.Minute); !d.Allowed {
			t.Fatalf("dead%d kept a count past its expiry", i)
		}
	}
	if sh.live != 2*n {
		t.Fatalf("%d counters after the dead keys came back, want %d", sh.live, 2*n)
	}
}

// Keys that come and go at a steady number (each new key evicting one,
// each eviction a tombstone) keep a shard's table at the size tableSize
// gives that number, however long the churn lasts: rebuilds clear the
// tombstones in place.
func TestTableKeepsItsSizeUnderChurn(t *testing.T) {
	s := New(Options{Shards: 1, MaxKeys: 3000, SweepInterval: -1})
	defer s.Close()
	sh := &s.shards[0]
	next := 0
	churn := func(n int) {
		for range n {
			take(t, s, "k"+strconv.Itoa(next), ratelimit.PerHour(1).Fixed(), 0)
			next++
		}
	}
	churn(30_000)
	if sh.live != 3000 || len(sh.tab) != tableSize(3001) {
		t.Fatalf("after 27000 evictions: %d counters in a table of %d, want 3000 in %d", sh.live, len(sh.tab), tableSize(3001))
	}
	churn(30_000)
	if len(sh.tab) != tableSize(3001) {
		t.Fatalf("after 57000 evictions: a table of %d, want %d", len(sh.tab), tableSize(3001))
	}
}
