package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// A reservation says how long to wait; cancelled before its moment, it
// gives the unit back, after it, it does not.
func TestReserveDelayAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(1).Fixed())
		start := time.Now()
		if r := l.Reserve("k"); !r.OK() || r.Delay() != 0 {
			t.Fatalf("first reservation: OK %v, delay %s, want OK at once", r.OK(), r.Delay())
		}
		r := l.Reserve("k")
		if !r.OK() || r.Delay() != time.Second || r.DelayFrom(start.Add(300*time.Millisecond)) != 700*time.Millisecond {
			t.Fatalf("second reservation: OK %v, delay %s, want OK in 1s", r.OK(), r.Delay())
		}
		if l.Reserve("k").OK() {
			t.Fatal("a third reservation is OK, want not OK: the next window is taken")
		}
		r.Cancel()
		r.Cancel() // at most once
		time.Sleep(time.Second)
		if !l.Allow("k") {
			t.Error("the cancelled unit was not given back")
		}
		if l.Allow("k") {
			t.Error("a double cancel gave back two units")
		}

		late := l.Reserve("k") // for 2s
		time.Sleep(1500 * time.Millisecond)
		if err := late.CancelAt(context.Background(), start.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		if l.Allow("k") {
			t.Error("a cancel after the reserved moment gave the unit back")
		}
	})
}

// A reservation whose cost exceeds a limit is not OK, waits forever and
// takes nothing.
func TestReserveNAboveCapacity(t *testing.T) {
	l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(3).TokenBucket(0))
	now := time.Now()
	r, err := l.ReserveN(context.Background(), "k", 4, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.DelayFrom(now) != ratelimit.InfDuration {
		t.Errorf("ReserveN(4) over a bucket of 3: OK %v, delay %s, want not OK, InfDuration", r.OK(), r.DelayFrom(now))
	}
	if d, _ := l.AllowN(context.Background(), "k", 3, now); !d.Allowed {
		t.Error("a reservation that was not OK took units")
	}
}

// onlyStore hides every method of a store but the Store contract.
type onlyStore struct{ ratelimit.Store }

// A store that cannot reserve gives ReserveN an error naming it; Reserve
// is then not OK, and Wait polls as it did before reservations.
func TestReserveUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memorystore.New(memorystore.Options{})
		defer s.Close()
		l, err := ratelimit.NewLimiter(onlyStore{s}, ratelimit.LimiterOptions{}, ratelimit.PerSecond(1).Fixed())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.ReserveN(context.Background(), "k", 1, time.Now()); !errors.Is(err, ratelimit.ErrReserveUnsupported) {
			t.Errorf("ReserveN on a plain Store = %v, want ErrReserveUnsupported", err)
		}
		if l.Reserve("k").OK() {
			t.Error("Reserve on a plain Store is OK")
		}
		start := time.Now()
		for range 2 {
			if err := l.Wait(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("two waits on a plain Store took %s, want 1s", d)
		}
	})
}

// Waiters are served in the order they came: a waiter for two units that
// reserved the next window first is not overtaken by one for a single
// unit that came later, as it could be when every waiter polled.
func TestWaitServesWaitersInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(2).Fixed())
		start := time.Now()
		if err := l.WaitN(context.Background(), "k", 2); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		done := map[string]time.Duration{}
		var wg sync.WaitGroup
		wait := func(name string, n int64) {
			wg.Go(func() {
				if err := l.WaitN(context.Background(), "k", n); err != nil {
					t.Error(err)
				}
				mu.Lock()
				done[name] = time.Since(start)
				mu.Unlock()
			})
			synctest.Wait()
		}
		wait("big", 2)
		wait("small", 1)
		wg.Wait()
		if done["big"] != time.Second || done["small"] != 2*time.Second {
			t.Errorf("big got through at %s, small at %s, want 1s and 2s", done["big"], done["small"])
		}
	})
}

// A wait ended by its context gives its reservation back at once.
func TestWaitCancelledGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerMinute(1).Fixed())
		if !l.Allow("k") {
			t.Fatal("denied under the limit")
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := l.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait = %v, want context.Canceled", err)
			}
		})
		synctest.Wait()
		cancel()
		wg.Wait()
		r := l.Reserve("k")
		if !r.OK() || r.Delay() != time.Minute {
			t.Errorf("after the cancelled wait: OK %v, delay %s, want the next window's slot", r.OK(), r.Delay())
		}
	})
}
