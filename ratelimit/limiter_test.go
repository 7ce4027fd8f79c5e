package ratelimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// newLimiter returns a limiter over a fresh memory store, both closed when
// the (synctest) test ends. Inside a synctest bubble the clock starts at
// midnight UTC, so every window starts there.
func newLimiter(t *testing.T, opts ratelimit.LimiterOptions, limits ...ratelimit.Limit) *ratelimit.Limiter {
	t.Helper()
	s := memorystore.New(memorystore.Options{})
	t.Cleanup(func() { s.Close() })
	l, err := ratelimit.NewLimiter(s, opts, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Wait returns at once while the limit allows, then sleeps exactly until
// the next window.
func TestWaitSleepsUntilAllowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(2).Fixed())
		start := time.Now()
		var took []time.Duration
		for range 5 {
			if err := l.Wait(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		want := []time.Duration{0, 0, time.Second, time.Second, 2 * time.Second}
		if !slices.Equal(took, want) {
			t.Errorf("calls returned at %v, want %v", took, want)
		}
	})
}

// A wait that would end after the context's deadline is refused at once,
// without sleeping; one that ends before it is slept through.
func TestWaitRespectsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerMinute(1).Fixed())
		if err := l.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 59*time.Second)
		defer cancel()
		err := l.Wait(ctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "would exceed") {
			t.Errorf("Wait with a too-near deadline = %v, want the wait refused as context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("refusing took %s, want no sleep at all", d)
		}

		// A wait ending exactly at the deadline is refused too: sleeping
		// would race the context's expiry.
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := l.Wait(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "would exceed") {
			t.Errorf("Wait with the deadline at the next window = %v, want the wait refused as context.DeadlineExceeded", err)
		}

		ctx, cancel = context.WithTimeout(context.Background(), 61*time.Second)
		defer cancel()
		if err := l.Wait(ctx, "k"); err != nil {
			t.Errorf("Wait with a deadline past the next window = %v", err)
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("Wait returned after %s, want exactly 1m", d)
		}
	})
}

// A cost that exceeds a limit's capacity can never be allowed: WaitN says
// so at once.
func TestWaitNCostAboveCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(10), ratelimit.PerSecond(3).TokenBucket(0))
		err := l.WaitN(context.Background(), "k", 4)
		if !errors.Is(err, ratelimit.ErrCostExceedsLimit) {
			t.Errorf("WaitN(4) over a bucket of 3 = %v, want ErrCostExceedsLimit", err)
		}
		if err := l.WaitN(context.Background(), "k", 3); err != nil {
			t.Errorf("WaitN(3) = %v", err)
		}
	})
}

// Cancelling the context ends a wait at the moment of cancellation.
func TestWaitEndsWhenContextIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerHour(1).Fixed())
		if err := l.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		go func() {
			time.Sleep(3 * time.Second)
			cancel()
		}()
		if err := l.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("Wait returned after %s, want 3s", d)
		}
		if err := l.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait on a cancelled context = %v, want context.Canceled", err)
		}
	})
}

// Many waiters on one key share the limit: one per window gets through,
// the others wait on.
func TestWaitersShareTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(1).Fixed())
		start := time.Now()
		var mu sync.Mutex
		var done []time.Duration
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if err := l.Wait(context.Background(), "k"); err != nil {
					t.Error(err)
				}
				mu.Lock()
				done = append(done, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(done)
		want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
		if !slices.Equal(done, want) {
			t.Errorf("waiters got through at %v, want %v", done, want)
		}
	})
}

// A token bucket paces waiters at its rate, not at window edges.
func TestWaitPacesAtBucketRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerSecond(4).TokenBucket(1))
		start := time.Now()
		var took []time.Duration
		for range 4 {
			if err := l.Wait(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
		if !slices.Equal(took, want) {
			t.Errorf("calls returned at %v, want %v", took, want)
		}
	})
}

func TestSetLimitsKeepsCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.LimiterOptions{}, ratelimit.PerMinute(3).Fixed())
		for range 2 {
			if !l.Allow("k") {
				t.Fatal("denied under the limit")
			}
		}
		if err := l.SetLimits(ratelimit.PerMinute(2).Fixed()); err != nil {
			t.Fatal(err)
		}
		if l.Allow("k") {
			t.Error("allowed a third call after lowering the limit to 2: the counter was reset")
		}
		if err := l.SetLimits(ratelimit.Limit{}); !errors.Is(err, ratelimit.ErrInvalidLimit) {
			t.Errorf("SetLimits(invalid) = %v", err)
		}
		if got := l.Limits(); len(got) != 1 || got[0] != ratelimit.PerMinute(2).Fixed() {
			t.Errorf("a rejected SetLimits changed the limits to %v", got)
		}
	})
}

// takeOnly hides every method of a store but Take and Close.
type takeOnly struct{ ratelimit.Store }

func TestAllowAdmitsNothingAfterClose(t *testing.T) {
	for _, wrap := range []func(ratelimit.Store) ratelimit.Store{
		func(s ratelimit.Store) ratelimit.Store { return s },
		func(s ratelimit.Store) ratelimit.Store { return takeOnly{s} },
	} {
		store := memorystore.New(memorystore.Options{})
		l, err := ratelimit.NewLimiter(wrap(store), ratelimit.LimiterOptions{}, ratelimit.PerHour(100))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Allow("k") {
			t.Fatal("first call denied")
		}
		store.Close()
		if l.Allow("k") {
			t.Errorf("Allow over %T after Close: true, want false", wrap(store))
		}
	}
}
