package ratelimit

// NOTE on reservations. A reservation takes a call's units now for the
// moment they will be admitted, as golang.org/x/time/rate's Reserve does:
// the caller learns how long to wait, and every later call sees the units
// already taken, so waiters are served in the order they reserved, as far
// ahead as a reservation reaches (see below).
//
// The moment is the earliest one, not before the request's time, at which
// every limit admits the cost given the counts known now; the units are
// counted where a call at that moment would be counted:
//
//   - token bucket: the TAT moves as for a call at that moment, so it may
//     lie further in the future than a bucket's depth;
//   - fixed window: in the current window if it has room, else in the next
//     one, from its start;
//   - sliding window: at the first millisecond of the current window at
//     which the weighted rate admits the cost, else of the next window.
//     In the next window the current window weighs as if it ended full
//     (its count or Count, whichever is larger): calls still allowed in it
//     after the reservation then never push the rate above Count at the
//     reserved moment.
//
// A window limit reserves no further ahead than the next window: a call
// that needs more is not OK, and the Reservation says when to try again
// (Wait does). A reservation is all or nothing over its limits, and takes
// nothing when it is not OK: the cost exceeds a limit's capacity, or the
// wait would exceed the maximum the caller gave. Penalty does not apply.
//
// Cancelling gives the units back if the reserved moment has not passed:
// a window count drops by the cost; a token bucket's TAT moves back by the
// cost less what was taken after the reservation (x/time/rate's rule), so
// later reservations keep their moments.
//
// Concurrency leases are not reserved.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrReserveUnsupported is returned by Limiter.ReserveN when the store
// cannot reserve: it is not a Reserver, or not in the mode it runs in.
var ErrReserveUnsupported = errors.New("ratelimit: store cannot reserve")

// A Reserver is a Store that can take units for a later moment, which
// Limiter.Reserve needs and Limiter.Wait uses when it can. The conformance
// suite holds Reserve and Unreserve to the same timelines for every store;
// package storekit has the math (storekit.Reserve, storekit.Unreserve).
type Reserver interface {
	Store
	// Reserve takes r.Cost units of r.Key for the earliest moment, at most
	// maxDelay after r.Now, at which every limit of r admits them (see the
	// package's reservation rules). r.Penalty, r.AllowOnly and r.Peek are
	// ignored. It returns an error only when r is invalid (wrapping
	// ErrInvalidLimit), the store failed, or it cannot reserve in its mode
	// (wrapping ErrReserveUnsupported). Not being OK is not an error.
	Reserve(ctx context.Context, r Request, maxDelay time.Duration) (Booking, error)
	// Unreserve gives back what b, the answer to Reserve for r's key,
	// limits and cost, took, as far as it still can at r.Now: nothing once
	// r.Now is after b.At.
	Unreserve(ctx context.Context, r Request, b Booking) error
}

// A Booking is a store's answer to Reserve.
type Booking struct {
	// OK reports whether the units were taken.
	OK bool
	// At is, when OK, the moment the call may proceed, never before the
	// request's time. When not OK it is the earliest moment a new
	// reservation could be OK as far as the store can tell now, or zero if
	// never (the cost exceeds a limit's capacity).
	At time.Time
	// Marks say, per limit, where the units were counted, for Unreserve:
	// a window's start in Unix milliseconds, or a token bucket's TAT after
	// the reservation in Unix microseconds. Nil when not OK.
	Marks []int64
}

// A Reservation holds units a Limiter took for a call at a later moment:
// the caller waits Delay, then acts, or calls Cancel if it will not act.
// Its methods are safe for concurrent use.
type Reservation struct {
	rs     Reserver
	key    string
	limits []Limit
	n      int64
	b      Booking

	mu       sync.Mutex
	canceled bool
}

// OK reports whether the units were taken: the call may proceed after
// Delay. A reservation that is not OK took nothing and need not be
// cancelled.
func (r *Reservation) OK() bool { return r.b.OK }

// Delay is shorthand for DelayFrom(time.Now()).
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom returns how long the holder must wait from t before acting:
// zero when the moment has come, InfDuration when the reservation is not
// OK.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.b.OK {
		return InfDuration
	}
	return max(r.b.At.Sub(t), 0)
}

// retryFrom returns, for a reservation that is not OK, how long from t
// until a new one could be OK, or InfDuration if never.
func (r *Reservation) retryFrom(t time.Time) time.Duration {
	if r.b.At.IsZero() {
		return InfDuration
	}
	return max(r.b.At.Sub(t), 0)
}

// Cancel is shorthand for CancelAt(context.Background(), time.Now()), with
// the error left out.
func (r *Reservation) Cancel() { _ = r.CancelAt(context.Background(), time.Now()) }

// CancelAt says that the holder will not act, and gives the units back to
// the limits as far as it still can at t: nothing once t is after the
// reserved moment. A reservation is cancelled at most once; cancelling one
// that is not OK does nothing. The error is the store's.
func (r *Reservation) CancelAt(ctx context.Context, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.b.OK || r.rs == nil || r.canceled || t.After(r.b.At) {
		return nil
	}
	err := r.rs.Unreserve(ctx, Request{Key: r.key, Limits: r.limits, Cost: r.n, Now: t}, r.b)
	if err == nil {
		r.canceled = true
	}
	return err
}

// Reserve is shorthand for ReserveN(context.Background(), key, 1,
// time.Now()). A store failure gives an OK reservation without delay, as
// Allow counts a failed call allowed; a store that cannot reserve gives
// one that is not OK. Use ReserveN to see the error.
func (l *Limiter) Reserve(key string) *Reservation {
	now := time.Now()
	r, err := l.ReserveN(context.Background(), key, 1, now)
	switch {
	case errors.Is(err, ErrReserveUnsupported):
		return &Reservation{key: key, n: 1}
	case err != nil:
		return &Reservation{key: key, n: 1, b: Booking{OK: true, At: now}}
	}
	return r
}

// ReserveN takes n units of key for the earliest moment, not before now, at
// which every limit admits them, and returns the Reservation: its Delay
// says how long to wait. The reservation is not OK, taking nothing, when n
// exceeds a limit's capacity or a window limit would have to reserve past
// its next window (see the package's reservation rules). It returns an
// error wrapping ErrReserveUnsupported when the store cannot reserve, and
// the store's error when it failed.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, now time.Time) (*Reservation, error) {
	return l.reserve(ctx, key, n, now, InfDuration)
}

// reserve is ReserveN with a bound on the delay.
func (l *Limiter) reserve(ctx context.Context, key string, n int64, now time.Time, maxDelay time.Duration) (*Reservation, error) {
	rs, ok := l.store.(Reserver)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a ratelimit.Reserver", ErrReserveUnsupported, l.store)
	}
	limits := *l.limits.Load()
	b, err := rs.Reserve(ctx, Request{Key: key, Limits: limits, Cost: n, Now: now}, maxDelay)
	if err != nil {
		return nil, err
	}
	return &Reservation{rs: rs, key: key, limits: limits, n: n, b: b}, nil
}

// waitReserved is WaitN by reservation: it reserves, bounded by ctx's
// deadline, and sleeps until the reserved moment, cancelling the
// reservation if ctx ends first. It reports false, having done nothing,
// when the store cannot reserve.
func (l *Limiter) waitReserved(ctx context.Context, key string, n int64) (bool, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	sleep := func(d time.Duration) bool {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		now := time.Now()
		maxDelay := InfDuration
		dl, hasDeadline := ctx.Deadline()
		if hasDeadline {
			// A wait ending at the deadline itself would race the
			// context's expiry, so it is refused too.
			maxDelay = max(dl.Sub(now)-1, 0)
		}
		r, err := l.reserve(ctx, key, n, now, maxDelay)
		if errors.Is(err, ErrReserveUnsupported) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		if r.OK() {
			d := r.DelayFrom(now)
			if d == 0 || sleep(d) {
				return true, nil
			}
			r.Cancel()
			return true, ctx.Err()
		}
		wait := r.retryFrom(now)
		if wait == InfDuration {
			for _, lim := range r.limits {
				if n > lim.Capacity() {
					return true, fmt.Errorf("%w: cost %d, capacity %d (%s)", ErrCostExceedsLimit, n, lim.Capacity(), lim)
				}
			}
			return true, fmt.Errorf("%w: cost %d", ErrCostExceedsLimit, n)
		}
		if hasDeadline && !now.Add(wait).Before(dl) {
			return true, fmt.Errorf("ratelimit: wait of %s for %q would exceed the context deadline: %w", wait, key, context.DeadlineExceeded)
		}
		if wait <= 0 {
			wait = time.Millisecond
		}
		if !sleep(wait) {
			return true, ctx.Err()
		}
	}
}
