// Package ratelimittest holds the conformance suite every ratelimit.Store
// (and ratelimit.LeaseStore) must pass, and the timeline helpers it is written with.
//
// A store's test calls Run with a Factory that returns a fresh, empty store.
// Every call of the suite passes an explicit Request.Now on a symbolic
// timeline (offsets from T0), so a store must decide by the caller's clock:
// a Redis store runs the suite in its caller-clock mode. The same tables
// hold the Go math (storekit.Apply) and the Redis scripts in lockstep.
//
// Hammer is the concurrent check: many goroutines on one key, compared with
// a serial replay of the same calls.
package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// T0 is the origin of every timeline: the UTC midnight two days after the
// test binary started. Every window that divides a day (a second, a minute,
// an hour, a day) starts at T0, so offsets from T0 land on window edges
// exactly. T0 lies in the future on purpose: a store that sweeps idle
// counters by its own wall clock, or a Redis store that sets absolute expiry
// times, then never drops a counter in the middle of a timeline. The math is
// the same for every aligned origin, so results do not depend on the date.
var T0 = time.Now().UTC().Truncate(24 * time.Hour).Add(48 * time.Hour)

// At returns the instant d after T0.
func At(d time.Duration) time.Time { return T0.Add(d) }

// A Step is one Take on a timeline and what it must return.
type Step struct {
	// At is the call's time as an offset from T0.
	At time.Duration
	// Key overrides the timeline's key when not empty.
	Key string
	// Limits overrides the timeline's limits when not nil, as a new
	// configuration would.
	Limits []ratelimit.Limit
	// Cost is the call's cost; zero means 1.
	Cost int64

	// Allowed is the expected Decision.Allowed. An allowed decision must
	// have RetryAfter zero and Denied -1.
	Allowed bool
	// Denied is the expected index of the denying limit; checked when the
	// call is denied.
	Denied int
	// RetryAfter is the expected RetryAfter of a denied call; zero means not
	// checked.
	RetryAfter time.Duration
	// Remaining are the expected Remaining of each limit; nil means not
	// checked.
	Remaining []int64
	// Reset are the expected Reset of each limit; nil means not checked.
	Reset []time.Duration
}

// A Timeline is a sequence of Take calls on one store, each with its
// expected decision.
type Timeline struct {
	Name    string
	Key     string // "" means "k"
	Limits  []ratelimit.Limit
	Penalty bool
	Steps   []Step
}

// Play runs tl on s and fails t at the first step whose decision differs
// from the expected one, naming the step's index and time.
func Play(t testing.TB, s ratelimit.Store, tl Timeline) {
	t.Helper()
	if err := play(s, tl); err != nil {
		t.Fatal(err)
	}
}

// PlayAllowOnly runs tl on two empty stores in lockstep, on full with
// plain requests and on fast with Request.AllowOnly, and fails t at the
// first step whose decisions differ in Allowed, Denied or RetryAfter, or
// whose full decision differs from the expected one. The allow-only
// decision may leave out its limit states; if it has them, they must be
// the full decision's. When fast is a ratelimit.Allower, every other step
// calls Allow instead, which must answer the full decision's Allowed.
func PlayAllowOnly(t testing.TB, full, fast ratelimit.Store, tl Timeline) {
	t.Helper()
	if err := playAllowOnly(full, fast, tl); err != nil {
		t.Fatal(err)
	}
}

func playAllowOnly(full, fast ratelimit.Store, tl Timeline) error {
	ctx := context.Background()
	for i, st := range tl.Steps {
		r := stepRequest(&tl, &st)
		d, err := full.Take(ctx, r)
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, key %q): Take: %w", i, st.At, r.Key, err)
		}
		if msg := checkDecision(&d, &st, len(r.Limits)); msg != "" {
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): %s", i, st.At, r.Key, st.Cost, msg)
		}
		r.AllowOnly = true
		if a, ok := fast.(ratelimit.Allower); ok && i%2 == 1 {
			allowed, err := a.Allow(ctx, r)
			if err != nil {
				return fmt.Errorf("step %d (t0+%s, key %q): Allow: %w", i, st.At, r.Key, err)
			}
			if allowed != d.Allowed {
				return fmt.Errorf("step %d (t0+%s, key %q, cost %d): Allow = %v, full decision %s",
					i, st.At, r.Key, st.Cost, allowed, describe(&d))
			}
			continue
		}
		q, err := fast.Take(ctx, r)
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, key %q): allow-only Take: %w", i, st.At, r.Key, err)
		}
		switch {
		case q.Allowed != d.Allowed || q.Denied != d.Denied || q.RetryAfter != d.RetryAfter:
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): allow-only decision %s, full decision %s",
				i, st.At, r.Key, st.Cost, describe(&q), describe(&d))
		case q.Len() != 0 && !slices.Equal(q.States(), d.States()):
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): allow-only states %v, full states %v",
				i, st.At, r.Key, st.Cost, q.States(), d.States())
		}
	}
	return nil
}

// PlayLimiter runs tl through a ratelimit.Limiter over s, in a
// testing/synctest bubble whose clock it moves to each step's time, and
// fails t at the first step whose decision differs from the expected one.
// Steps of cost 1 call Limiter.Allow, the allow-only path reading the
// Limiter's clock, and must answer the expected Allowed; the others (and a
// step whose time is before the bubble's clock) call Limiter.AllowN and
// are checked in full.
func PlayLimiter(t *testing.T, s ratelimit.Store, tl Timeline) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		if err := playLimiter(s, tl); err != nil {
			t.Fatal(err)
		}
	})
}

func playLimiter(s ratelimit.Store, tl Timeline) error {
	ctx := context.Background()
	l, err := ratelimit.NewLimiter(s, ratelimit.LimiterOptions{Penalty: tl.Penalty}, tl.Limits...)
	if err != nil {
		return err
	}
	for i, st := range tl.Steps {
		r := stepRequest(&tl, &st)
		if err := l.SetLimits(r.Limits...); err != nil {
			return fmt.Errorf("step %d: SetLimits: %w", i, err)
		}
		if d := time.Until(r.Now); d > 0 {
			time.Sleep(d)
		}
		if r.Cost <= 1 && time.Now().Equal(r.Now) {
			if got := l.Allow(r.Key); got != st.Allowed {
				return fmt.Errorf("step %d (t0+%s, key %q): Limiter.Allow = %v, want %v", i, st.At, r.Key, got, st.Allowed)
			}
			continue
		}
		d, err := l.AllowN(ctx, r.Key, max(r.Cost, 1), r.Now)
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, key %q): Limiter.AllowN: %w", i, st.At, r.Key, err)
		}
		if msg := checkDecision(&d, &st, len(r.Limits)); msg != "" {
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): Limiter.AllowN: %s", i, st.At, r.Key, st.Cost, msg)
		}
	}
	return nil
}

// stepRequest is the request of step st of tl.
func stepRequest(tl *Timeline, st *Step) ratelimit.Request {
	r := ratelimit.Request{
		Key:     tl.Key,
		Limits:  tl.Limits,
		Cost:    st.Cost,
		Now:     At(st.At),
		Penalty: tl.Penalty,
	}
	if r.Key == "" {
		r.Key = "k"
	}
	if st.Key != "" {
		r.Key = st.Key
	}
	if st.Limits != nil {
		r.Limits = st.Limits
	}
	return r
}

func play(s ratelimit.Store, tl Timeline) error {
	ctx := context.Background()
	for i, st := range tl.Steps {
		r := stepRequest(&tl, &st)
		d, err := s.Take(ctx, r)
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, key %q): Take: %w", i, st.At, r.Key, err)
		}
		if msg := checkDecision(&d, &st, len(r.Limits)); msg != "" {
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): %s", i, st.At, r.Key, st.Cost, msg)
		}
	}
	return nil
}

func checkDecision(d *ratelimit.Decision, st *Step, n int) string {
	switch {
	case d.Allowed != st.Allowed:
		return sprintf("allowed = %v, want %v (decision %s)", d.Allowed, st.Allowed, describe(d))
	case d.Len() != n:
		return sprintf("decision has %d limit states, want %d", d.Len(), n)
	case d.Allowed && (d.RetryAfter != 0 || d.Denied != -1):
		return sprintf("allowed with RetryAfter %s and Denied %d, want 0 and -1", d.RetryAfter, d.Denied)
	case !d.Allowed && d.Denied != st.Denied:
		return sprintf("denied by limit %d, want %d (decision %s)", d.Denied, st.Denied, describe(d))
	case !d.Allowed && st.RetryAfter != 0 && d.RetryAfter != st.RetryAfter:
		return sprintf("RetryAfter = %s, want %s", fmtDur(d.RetryAfter), fmtDur(st.RetryAfter))
	}
	for j, want := range st.Remaining {
		if got := d.State(j).Remaining; got != want {
			return sprintf("limit %d Remaining = %d, want %d (decision %s)", j, got, want, describe(d))
		}
	}
	for j, want := range st.Reset {
		if got := d.State(j).Reset; got != want {
			return sprintf("limit %d Reset = %s, want %s", j, got, want)
		}
	}
	return ""
}

// A LeaseStep is one Acquire or Release on a lease timeline.
type LeaseStep struct {
	// At is the call's time as an offset from T0 (unused by Release, which
	// takes no time).
	At time.Duration
	// Key overrides the timeline's key when not empty.
	Key string
	// ID is the lease acquired or released.
	ID string
	// Release makes the step a Release of ID instead of an Acquire.
	Release bool

	// Allowed is the expected Lease.Allowed.
	Allowed bool
	// Active is the expected number of live leases after the call.
	Active int64
	// RetryAfter is the expected RetryAfter of a denied acquisition; zero
	// means not checked.
	RetryAfter time.Duration
}

// A LeaseTimeline is a sequence of lease calls on one store.
type LeaseTimeline struct {
	Name  string
	Key   string // "" means "k"
	Max   int64
	TTL   time.Duration
	Steps []LeaseStep
}

// PlayLeases runs tl on s and fails t at the first step whose result
// differs from the expected one, naming the step's index and time.
func PlayLeases(t testing.TB, s ratelimit.LeaseStore, tl LeaseTimeline) {
	t.Helper()
	if err := playLeases(s, tl); err != nil {
		t.Fatal(err)
	}
}

func playLeases(s ratelimit.LeaseStore, tl LeaseTimeline) error {
	ctx := context.Background()
	for i, st := range tl.Steps {
		key := tl.Key
		if key == "" {
			key = "k"
		}
		if st.Key != "" {
			key = st.Key
		}
		if st.Release {
			if err := s.Release(ctx, key, st.ID); err != nil {
				return fmt.Errorf("step %d (release %q on %q): %w", i, st.ID, key, err)
			}
			continue
		}
		now := At(st.At)
		l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: key, ID: st.ID, Max: tl.Max, TTL: tl.TTL, Now: now})
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, acquire %q on %q): %w", i, st.At, st.ID, key, err)
		}
		var msg string
		switch {
		case l.Allowed != st.Allowed:
			msg = sprintf("allowed = %v, want %v (lease %+v)", l.Allowed, st.Allowed, l)
		case l.Active != st.Active:
			msg = sprintf("active = %d, want %d", l.Active, st.Active)
		case l.Remaining != max(tl.Max-st.Active, 0):
			msg = sprintf("remaining = %d, want %d", l.Remaining, max(tl.Max-st.Active, 0))
		case l.Allowed && (!l.Expires.Equal(now.Add(tl.TTL)) || l.RetryAfter != 0):
			msg = sprintf("granted lease expires at t0+%s with RetryAfter %s, want t0+%s and 0",
				l.Expires.Sub(T0), l.RetryAfter, st.At+tl.TTL)
		case !l.Allowed && !l.Expires.IsZero():
			msg = sprintf("denied lease has Expires t0+%s, want zero", l.Expires.Sub(T0))
		case !l.Allowed && st.RetryAfter != 0 && l.RetryAfter != st.RetryAfter:
			msg = sprintf("RetryAfter = %s, want %s", l.RetryAfter, st.RetryAfter)
		}
		if msg != "" {
			return fmt.Errorf("step %d (t0+%s, acquire %q on %q): %s", i, st.At, st.ID, key, msg)
		}
	}
	return nil
}

// WantInvalid fails t unless err wraps ratelimit.ErrInvalidLimit.
func WantInvalid(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Errorf("%s: error = %v, want one wrapping ratelimit.ErrInvalidLimit", what, err)
	}
}
