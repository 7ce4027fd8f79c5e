package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

const (
	nodes      = 4  // independent stores, as four gateway nodes
	goroutines = 64 // callers per node
)

// hammer runs calls(i) from nodes x goroutines callers at once and returns
// how many were allowed. Any error fails the test.
func hammer(t *testing.T, stores []*Store, perCaller int, call func(s *Store, g, i int) (bool, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*goroutines)
	for n, s := range stores {
		for g := range goroutines {
			wg.Go(func() {
				for i := range perCaller {
					ok, err := call(s, n*goroutines+g, i)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

func exactness(t *testing.T, c *Client, scriptWindows bool) {
	stores := make([]*Store, nodes)
	ns := "exact"
	if scriptWindows {
		ns = "exact-script"
	}
	for i := range stores {
		stores[i] = newStore(t, c, Options{Namespace: ns, CallerClock: true, ManualSync: true, Timeout: 10 * time.Second, Strict: true})
	}
	ctx := context.Background()

	t.Run("FixedWindow", func(t *testing.T) {
		lim := []ratelimit.Limit{ratelimit.PerMinute(1000).Fixed()}
		for w := range 3 { // three windows, each hammered at one instant inside it
			now := ratelimittest.At(time.Duration(w)*time.Minute + 30*time.Second)
			got := hammer(t, stores, 6, func(s *Store, _, _ int) (bool, error) {
				d, err := via(s, scriptWindows).Take(ctx, ratelimit.Request{Key: "fixed", Limits: lim, Now: now})
				return d.Allowed, err
			})
			if got != 1000 {
				t.Fatalf("window %d: %d admitted of %d calls, want exactly 1000", w, got, nodes*goroutines*6)
			}
		}
	})

	t.Run("ManyKeys", func(t *testing.T) {
		// Batches mix keys (and, on Cluster, slots): each of 100 keys gets
		// 256 calls and admits exactly its limit of 5.
		const keys = 100
		var admitted [keys]atomic.Int64
		lim := []ratelimit.Limit{ratelimit.PerMinute(5).Fixed()}
		now := ratelimittest.At(10*time.Minute + time.Second)
		hammer(t, stores, keys, func(s *Store, g, i int) (bool, error) {
			k := (g*7 + i) % keys
			d, err := via(s, scriptWindows).Take(ctx, ratelimit.Request{Key: "many-" + strconv.Itoa(k), Limits: lim, Now: now})
			if d.Allowed {
				admitted[k].Add(1)
			}
			return d.Allowed, err
		})
		for k := range admitted {
			if n := admitted[k].Load(); n != 5 {
				t.Fatalf("key %d admitted %d, want 5", k, n)
			}
		}
	})

	t.Run("TokenBucket", func(t *testing.T) {
		// 100 per second, burst 50: a full bucket admits 50; every 100 ms
		// later it has refilled exactly 10.
		lim := []ratelimit.Limit{ratelimit.PerSecond(100).TokenBucket(50)}
		want := []int64{50, 10, 10, 10}
		for p, w := range want {
			now := ratelimittest.At(time.Hour + time.Duration(p)*100*time.Millisecond)
			got := hammer(t, stores, 1, func(s *Store, _, _ int) (bool, error) {
				d, err := via(s, scriptWindows).Take(ctx, ratelimit.Request{Key: "bucket", Limits: lim, Now: now})
				return d.Allowed, err
			})
			if got != w {
				for i, s := range stores {
					t.Logf("store %d: %+v", i, s.Stats())
				}
				t.Fatalf("phase %d: %d admitted, want %d", p, got, w)
			}
		}
	})

	t.Run("Concurrency", func(t *testing.T) {
		const maxLeases = 10
		var live, peak, granted atomic.Int64
		now := ratelimittest.At(2 * time.Hour)
		hammer(t, stores, 4, func(s *Store, g, i int) (bool, error) {
			id := strconv.Itoa(g) + "/" + strconv.Itoa(i)
			l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "conc", ID: id, Max: maxLeases, TTL: time.Minute, Now: now})
			if err != nil || !l.Allowed {
				return false, err
			}
			granted.Add(1)
			n := live.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			if l.Active > maxLeases {
				t.Errorf("Active = %d, above Max %d", l.Active, maxLeases)
			}
			live.Add(-1)
			return true, s.Release(ctx, "conc", id)
		})
		if p := peak.Load(); p > maxLeases || p < 1 {
			t.Fatalf("peak live holders %d, want 1..%d", p, maxLeases)
		}
		if granted.Load() < maxLeases {
			t.Fatalf("only %d leases granted", granted.Load())
		}
	})
}

func TestExactnessStandalone(t *testing.T) {
	_, c := standalone(t)
	exactness(t, c, false)
}

func TestExactnessCluster(t *testing.T) {
	_, c := cluster(t)
	exactness(t, c, false)
}

// Windows in a request with a token bucket are decided by take.lua: the
// same bounds hold there.
func TestExactnessStandaloneScript(t *testing.T) {
	_, c := standalone(t)
	exactness(t, c, true)
}

// TestPeriodicOvershootBounded: with sync_rate > 0 each node decides on
// its own view between cycles, so the fleet can overshoot, by at most what
// the other nodes admit in one interval (Kong's documented trade-off); once
// a cycle has shared the totals, no node admits past the limit.
func TestPeriodicOvershootBounded(t *testing.T) {
	_, c := standalone(t)
	const limit, perCycle = 1000, 150
	stores := make([]*Store, nodes)
	for i := range stores {
		stores[i] = newStore(t, c, periodic("overshoot"))
	}
	ctx := context.Background()
	lim := []ratelimit.Limit{ratelimit.PerMinute(limit).Fixed()}
	var total int64
	for cycle := range 5 {
		now := ratelimittest.At(time.Duration(cycle) * 100 * time.Millisecond)
		var admitted int64
		for _, s := range stores {
			for range perCycle {
				d := take(t, s, ratelimit.Request{Key: "k", Limits: lim, Now: now})
				if d.Allowed {
					admitted++
				}
			}
		}
		total += admitted
		if total > limit+(nodes-1)*perCycle {
			t.Fatalf("cycle %d: %d admitted in the window, more than limit + one interval of the other nodes (%d)", cycle, total, limit+(nodes-1)*perCycle)
		}
		for _, s := range stores {
			if err := s.Sync(ctx, now); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range stores { // all in step: a second pass pulls every node's push
			if err := s.Sync(ctx, now); err != nil {
				t.Fatal(err)
			}
		}
		if total >= limit {
			for i, s := range stores {
				if d := take(t, s, ratelimit.Request{Key: "k", Limits: lim, Now: now}); d.Allowed {
					t.Fatalf("cycle %d: node %d admitted after the totals (%d) were shared", cycle, i, total)
				}
			}
		}
	}
	t.Logf("admitted %d of limit %d (overshoot %d)", total, limit, total-limit)
}

// TakeAll decides each request as Take does: under the same hammering,
// every key admits exactly its limit, whichever path (one batch, or queued
// for the batchers) its calls took.
func TestExactnessTakeAll(t *testing.T) {
	_, c := standalone(t)
	stores := make([]*Store, nodes)
	for i := range stores {
		stores[i] = newStore(t, c, Options{Namespace: "exact-all", CallerClock: true, ManualSync: true, Timeout: 10 * time.Second, Strict: true})
	}
	ctx := context.Background()
	now := ratelimittest.At(time.Hour + 30*time.Second)
	fixed := []ratelimit.Limit{ratelimit.PerMinute(1000).Fixed()}
	bucket := []ratelimit.Limit{ratelimit.PerSecond(100).TokenBucket(50)}
	var fixedN, bucketN atomic.Int64
	hammer(t, stores, 6, func(s *Store, _, _ int) (bool, error) {
		rs := []ratelimit.Request{
			{Key: "fixed", Limits: fixed, Now: now},
			{Key: "bucket", Limits: bucket, Now: now},
		}
		ds := make([]ratelimit.Decision, len(rs))
		errs := make([]error, len(rs))
		s.TakeAll(ctx, rs, ds, errs)
		for _, err := range errs {
			if err != nil {
				return false, err
			}
		}
		if ds[0].Allowed {
			fixedN.Add(1)
		}
		if ds[1].Allowed {
			bucketN.Add(1)
		}
		return false, nil
	})
	if got := fixedN.Load(); got != 1000 {
		t.Errorf("fixed window: %d admitted of %d calls, want exactly 1000", got, nodes*goroutines*6)
	}
	if got := bucketN.Load(); got != 50 {
		t.Errorf("token bucket: %d admitted, want exactly 50", got)
	}
}
