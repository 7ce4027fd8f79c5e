package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// A ReserveStep is one call on a reservation timeline: a Reserve (the
// default), a Take, or with Cancel set an Unreserve.
type ReserveStep struct {
	// At is the call's time as an offset from T0.
	At time.Duration
	// Cost is the call's cost; zero means 1.
	Cost int64
	// MaxDelay bounds a Reserve's delay; zero means no bound.
	MaxDelay time.Duration
	// Take makes the step a Take, expected to answer Allowed.
	Take bool
	// Cancel, when > 0, makes the step an Unreserve of the booking of step
	// Cancel-1 (a Reserve step).
	Cancel int

	// OK is the expected Booking.OK of a Reserve; Allowed the expected
	// Decision.Allowed of a Take.
	OK, Allowed bool
	// Delay is the expected Booking.At minus the call's time: the wait of
	// an OK booking, when to try again for one that is not OK, or
	// ratelimit.InfDuration when it never can be.
	Delay time.Duration
}

// A ReserveTimeline is a sequence of reservations, takes and
// cancellations on one key of an empty store.
type ReserveTimeline struct {
	Name   string
	Limits []ratelimit.Limit
	Steps  []ReserveStep
}

// ReserveTimelines returns the suite's reservation timelines.
func ReserveTimelines() []ReserveTimeline {
	fixed2 := []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}
	sliding2 := []ratelimit.Limit{ratelimit.PerMinute(2)}
	bucket := []ratelimit.Limit{ratelimit.PerSecond(10).TokenBucket(5)} // 100 ms per unit, 500 ms deep
	inf := ratelimit.InfDuration
	return []ReserveTimeline{
		{
			// A full window reserves in the next one, from its start; the
			// next window full, it is not OK until that window begins.
			// A cancel before the reserved moment gives the unit back, one
			// after it does not.
			Name: "Fixed/ReserveNextWindow", Limits: fixed2,
			Steps: []ReserveStep{
				{At: 0, OK: true},
				{At: 0, OK: true},
				{At: 10 * sec, OK: true, Delay: 50 * sec},
				{At: 10 * sec, OK: true, Delay: 50 * sec},
				{At: 10 * sec, OK: false, Delay: 50 * sec},
				{At: 30 * sec, Take: true, Allowed: false},
				{At: 30 * sec, Cancel: 4},
				{At: minute, Take: true, Allowed: true}, // one reserved, one free
				{At: minute, Take: true, Allowed: false},
				{At: minute + sec, Cancel: 3}, // its moment has passed
				{At: minute + sec, Take: true, Allowed: false},
				{At: minute + sec, Cost: 3, OK: false, Delay: inf},
				{At: minute + sec, MaxDelay: 58 * sec, OK: false, Delay: 59 * sec},
				{At: minute + sec, MaxDelay: 59 * sec, OK: true, Delay: 59 * sec},
				{At: 2 * minute, Take: true, Allowed: true},
				{At: 2 * minute, Take: true, Allowed: false},
			},
		},
		{
			// The previous window's weight delays a reservation within the
			// window, where a later Take sees it; cancelled, it frees the
			// moment again.
			Name: "Sliding/ReserveInWindow", Limits: sliding2,
			Steps: []ReserveStep{
				{At: 0, Take: true, Allowed: true},
				{At: 0, Take: true, Allowed: true},
				{At: minute, OK: true, Delay: 30 * sec}, // 1 + 2 × 30/60 = 2
				{At: minute + 30*sec, Take: true, Allowed: false},
				{At: minute + 10*sec, Cancel: 3},
				{At: minute + 30*sec, Take: true, Allowed: true},
			},
		},
		{
			// A full window reserves in the next one, where the full window
			// weighs: at 90 s 1 + 2 × 30/60 = 2. The next window holding
			// it, the one after is the horizon.
			Name: "Sliding/ReserveNextWindow", Limits: sliding2,
			Steps: []ReserveStep{
				{At: 0, Take: true, Allowed: true},
				{At: 0, Take: true, Allowed: true},
				{At: 30 * sec, OK: true, Delay: minute},
				{At: 30 * sec, OK: false, Delay: 30 * sec},
				{At: minute + 30*sec - ms, Take: true, Allowed: false},
				{At: minute + 30*sec, Take: true, Allowed: false}, // the reservation has it
				// In the window after, the one of 1..2 minute weighs as if full.
				{At: minute + 30*sec, OK: true, Delay: minute},
				{At: 2*minute + 30*sec, Take: true, Allowed: false},
				{At: 3 * minute, Take: true, Allowed: true},
				{At: 3 * minute, Cost: 3, OK: false, Delay: inf},
			},
		},
		{
			// A bucket reserves by moving its TAT: each reservation waits
			// for the units before it. Cancelling the last one moves the TAT
			// back; one whose moment passed stays.
			Name: "Bucket/Reserve", Limits: bucket,
			Steps: []ReserveStep{
				{At: 0, Cost: 5, OK: true},
				{At: 0, OK: true, Delay: 100 * ms},
				{At: 0, Cost: 2, OK: true, Delay: 300 * ms},
				{At: 250 * ms, Take: true, Allowed: false},
				{At: 250 * ms, Cancel: 2}, // passed
				{At: 250 * ms, Cancel: 3},
				{At: 250 * ms, Take: true, Allowed: true},
				{At: 250 * ms, Cost: 6, OK: false, Delay: inf},
				{At: 250 * ms, Cost: 5, MaxDelay: 449 * ms, OK: false, Delay: 450 * ms},
				{At: 250 * ms, Cost: 5, OK: true, Delay: 450 * ms},
			},
		},
		{
			// Cancelling a reservation that later ones followed gives back
			// only what they did not take after it (x/time/rate's rule), so
			// the later ones keep their moments.
			Name: "Bucket/CancelBeforeLater", Limits: bucket,
			Steps: []ReserveStep{
				{At: 0, Cost: 5, OK: true},
				{At: 0, Cost: 2, OK: true, Delay: 200 * ms},
				{At: 0, OK: true, Delay: 300 * ms},
				{At: 0, Cancel: 2},
				{At: 0, OK: true, Delay: 300 * ms},
				{At: 0, OK: true, Delay: 400 * ms},
			},
		},
		{
			// Several limits: the moment is the first every limit admits,
			// and a reservation that is not OK takes nothing in any.
			Name: "Several/AllOrNothing",
			Limits: []ratelimit.Limit{
				ratelimit.PerMinute(2).Fixed(),
				ratelimit.Every(1, 10*sec).TokenBucket(0),
			},
			Steps: []ReserveStep{
				{At: 0, OK: true},
				{At: 0, OK: true, Delay: 10 * sec},
				{At: 0, OK: true, Delay: minute}, // the window is full until 60 s
				{At: 30 * sec, Take: true, Allowed: false},
				{At: 0, Cost: 3, OK: false, Delay: inf},
				// The bucket is taken until 70 s: too late for 10 s.
				{At: 30 * sec, MaxDelay: 10 * sec, OK: false, Delay: 40 * sec},
				{At: 30 * sec, OK: true, Delay: 40 * sec},
				{At: 30 * sec, OK: false, Delay: 30 * sec},
			},
		},
	}
}

// PlayReserve runs tl on s and fails t at the first step whose answer
// differs from the expected one.
func PlayReserve(t testing.TB, s ratelimit.Reserver, tl ReserveTimeline) {
	t.Helper()
	if err := playReserve(s, tl); err != nil {
		t.Fatal(err)
	}
}

func playReserve(s ratelimit.Reserver, tl ReserveTimeline) error {
	ctx := context.Background()
	bs := make([]ratelimit.Booking, len(tl.Steps))
	for i, st := range tl.Steps {
		now := At(st.At)
		r := ratelimit.Request{Key: "k", Limits: tl.Limits, Cost: st.Cost, Now: now}
		switch {
		case st.Cancel > 0:
			of := tl.Steps[st.Cancel-1]
			r.Cost = of.Cost
			if err := s.Unreserve(ctx, r, bs[st.Cancel-1]); err != nil {
				return fmt.Errorf("step %d (t0+%s): Unreserve: %w", i, st.At, err)
			}
		case st.Take:
			d, err := s.Take(ctx, r)
			if err != nil {
				return fmt.Errorf("step %d (t0+%s): Take: %w", i, st.At, err)
			}
			if d.Allowed != st.Allowed {
				return fmt.Errorf("step %d (t0+%s, cost %d): Take allowed = %v, want %v (decision %s)", i, st.At, st.Cost, d.Allowed, st.Allowed, describe(&d))
			}
		default:
			maxDelay := st.MaxDelay
			if maxDelay == 0 {
				maxDelay = ratelimit.InfDuration
			}
			b, err := s.Reserve(ctx, r, maxDelay)
			if err != nil {
				return fmt.Errorf("step %d (t0+%s): Reserve: %w", i, st.At, err)
			}
			bs[i] = b
			delay := ratelimit.InfDuration
			if !b.At.IsZero() {
				delay = b.At.Sub(now)
			}
			if b.OK != st.OK || delay != st.Delay {
				return fmt.Errorf("step %d (t0+%s, cost %d): Reserve OK = %v, at t0+%s, want %v, at t0+%s",
					i, st.At, st.Cost, b.OK, fmtDur(delay+st.At), st.OK, fmtDur(st.Delay+st.At))
			}
			if b.OK && len(b.Marks) != len(tl.Limits) {
				return fmt.Errorf("step %d (t0+%s): booking has %d marks, want %d", i, st.At, len(b.Marks), len(tl.Limits))
			}
		}
	}
	return nil
}

// runReserve holds a Reserver to the reservation timelines; a store that
// is not one, or that cannot reserve in its mode, skips them.
func runReserve(t *testing.T, f Factory) {
	for _, tl := range ReserveTimelines() {
		t.Run("Reserve/"+tl.Name, func(t *testing.T) {
			rs, ok := open(t, f).(ratelimit.Reserver)
			if !ok {
				t.Skip("the store is not a ratelimit.Reserver")
			}
			_, err := rs.Reserve(context.Background(), ratelimit.Request{Key: "probe", Limits: tl.Limits, Now: T0}, 0)
			if errors.Is(err, ratelimit.ErrReserveUnsupported) {
				t.Skipf("the store cannot reserve: %v", err)
			}
			PlayReserve(t, rs, tl)
		})
	}
}
