package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/ratelimit/internal/access"
)

// A Limiter checks keys against a set of limits kept in a Store. It is the
// convenient face of the SDK: a Go service limiting its callers, or a client
// throttling itself before it calls somebody else's API.
//
// The limits can be replaced at any time with SetLimits; counters live in
// the store and are not reset by it. A Limiter is safe for concurrent use.
type Limiter struct {
	store   Store
	allower Allower        // store, when it is one
	checked checkedAllower // store, when it is one
	limits  atomic.Pointer[[]Limit]
	penalty bool
	clock   clock
}

// A checkedAllower is a store with a path for Allow that skips checking
// the limits, which SetLimits checked (memorystore.Store). now is in Unix
// nanoseconds; the answer is Allower.Allow's for a call of cost 1.
type checkedAllower interface {
	AllowChecked(key string, limits access.Checked[Limit], now int64, penalty bool) (bool, error)
}

// LimiterOptions configures a Limiter. The zero value is ready to use.
type LimiterOptions struct {
	// Penalty keeps denied calls counted; see Request.Penalty. The default
	// is all-or-nothing.
	Penalty bool
}

// NewLimiter returns a Limiter over store with the given limits, checked
// together on every call. It returns an error naming the first invalid
// limit.
func NewLimiter(store Store, opts LimiterOptions, limits ...Limit) (*Limiter, error) {
	l := &Limiter{store: store, penalty: opts.Penalty}
	l.allower, _ = store.(Allower)
	l.checked, _ = store.(checkedAllower)
	if err := l.SetLimits(limits...); err != nil {
		return nil, err
	}
	return l, nil
}

// SetLimits replaces the limits. Counters of windows that stay are kept.
func (l *Limiter) SetLimits(limits ...Limit) error {
	if err := ValidateLimits(limits); err != nil {
		return err
	}
	ls := append([]Limit(nil), limits...)
	l.limits.Store(&ls)
	return nil
}

// Limits returns a copy of the current limits.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), *l.limits.Load()...) }

// Allow reports whether a call of cost 1 for key may happen now, and takes
// it if so: AllowN(context.Background(), key, 1, time.Now()).Allowed, on the
// store's allow-only path (Allower, or Request.AllowOnly). A store failure
// counts as allowed, so that a broken store does not stop the caller,
// except ErrClosed: a closed store admits nothing. Use AllowN to see the
// error. Allow reads the wall clock once
// a second and the cheaper monotonic clock in between.
func (l *Limiter) Allow(key string) bool {
	if l.checked == nil {
		return l.allowStore(key)
	}
	ok, err := l.checked.AllowChecked(key, access.MakeChecked(*l.limits.Load()), l.clock.unixNano(), l.penalty)
	return allowedDespite(ok, err)
}

// allowStore is Allow over a store without AllowChecked; apart, so that
// Allow's frame stays small.
func (l *Limiter) allowStore(key string) bool {
	r := Request{Key: key, Limits: *l.limits.Load(), Cost: 1, Now: l.clock.now(), Penalty: l.penalty, AllowOnly: true}
	if l.allower != nil {
		ok, err := l.allower.Allow(context.Background(), r)
		return allowedDespite(ok, err)
	}
	d, err := l.store.Take(context.Background(), r)
	return allowedDespite(d.Allowed, err)
}

// allowedDespite is Allow's answer for a store's answer ok and error err:
// a failure allows the call, a closed store does not.
func allowedDespite(ok bool, err error) bool {
	if err != nil {
		return !errors.Is(err, ErrClosed)
	}
	return ok
}

// AllowN decides a call of cost n for key at time now. A cost of 0 counts
// as 1 (Request.Cost), unlike golang.org/x/time/rate, where AllowN(t, 0) is
// free and always allowed; use Request.Peek to ask without counting.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64, now time.Time) (Decision, error) {
	return l.store.Take(ctx, Request{Key: key, Limits: *l.limits.Load(), Cost: n, Now: now, Penalty: l.penalty})
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until a call of cost n for key is allowed, and takes it; n 0
// counts as 1, as in AllowN. It
// returns an error, without waiting, when n exceeds a limit's capacity
// (wrapping ErrCostExceedsLimit) or when the wait the store announces would
// reach or pass ctx's deadline (wrapping context.DeadlineExceeded); it
// returns ctx.Err() if ctx ends while waiting. It never sleeps past the deadline.
//
// Over a Reserver, WaitN reserves and sleeps until the reserved moment, so
// waiters whose units fit in the current or the next window are served in
// the order they came (a waiter beyond that retries and may be overtaken);
// it cancels the reservation if ctx ends first. Over another store each attempt is a real call to
// the store, so with Penalty set a waiting caller's attempts are counted
// like any other denied call.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if reserved, err := l.waitReserved(ctx, key, n); reserved {
		return err
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		d, err := l.AllowN(ctx, key, n, now)
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		if d.Impossible() {
			s := d.State(d.Denied)
			return fmt.Errorf("%w: cost %d, capacity %d (%s)", ErrCostExceedsLimit, n, s.Limit.Capacity(), s.Limit)
		}
		wait := d.RetryAfter
		if wait <= 0 {
			wait = time.Millisecond // another caller took the slot first
		}
		// A wait ending at the deadline itself would race the context's
		// expiry, so it is refused too.
		if dl, ok := ctx.Deadline(); ok && !now.Add(wait).Before(dl) {
			return fmt.Errorf("ratelimit: wait of %s for %q would exceed the context deadline: %w", wait, key, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}
