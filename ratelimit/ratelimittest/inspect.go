package ratelimittest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// PlayPeek runs tl on s with a Request.Peek before every Take (two, in
// fact) and fails t at the first step whose peeked decision differs from
// the Take that follows it in any field, or whose Take differs from the
// expected one: a peek reports exactly the decision the call would get and
// counts nothing.
func PlayPeek(t testing.TB, s ratelimit.Store, tl Timeline) {
	t.Helper()
	if err := playPeek(s, tl); err != nil {
		t.Fatal(err)
	}
}

func playPeek(s ratelimit.Store, tl Timeline) error {
	ctx := context.Background()
	for i, st := range tl.Steps {
		r := stepRequest(&tl, &st)
		r.Peek = true
		var peeks [2]ratelimit.Decision
		for j := range peeks {
			d, err := s.Take(ctx, r)
			if err != nil {
				return fmt.Errorf("step %d (t0+%s, key %q): peek %d: %w", i, st.At, r.Key, j, err)
			}
			peeks[j] = d
		}
		r.Peek = false
		d, err := s.Take(ctx, r)
		if err != nil {
			return fmt.Errorf("step %d (t0+%s, key %q): Take: %w", i, st.At, r.Key, err)
		}
		if msg := checkDecision(&d, &st, len(r.Limits)); msg != "" {
			return fmt.Errorf("step %d (t0+%s, key %q, cost %d): after two peeks: %s", i, st.At, r.Key, st.Cost, msg)
		}
		for j := range peeks {
			if !sameDecision(&peeks[j], &d) {
				return fmt.Errorf("step %d (t0+%s, key %q, cost %d): peek %d = %s, Take = %s",
					i, st.At, r.Key, st.Cost, j, describe(&peeks[j]), describe(&d))
			}
		}
	}
	return nil
}

func sameDecision(a, b *ratelimit.Decision) bool {
	return a.Allowed == b.Allowed && a.Denied == b.Denied && a.RetryAfter == b.RetryAfter &&
		slices.Equal(a.States(), b.States())
}

// RunInspect holds an Inspector made by f to the inspect and reset
// timelines, and a LeaseInspector to the lease ones; Run calls it. Stores
// that cannot hold a token bucket (ErrInvalidLimit from Take) skip its
// subtest.
func RunInspect(t *testing.T, f Factory) {
	t.Run("Inspect/Windows", func(t *testing.T) { testInspectWindows(t, openInspector(t, f)) })
	t.Run("Inspect/TokenBucket", func(t *testing.T) { testInspectBucket(t, openInspector(t, f)) })
	t.Run("Inspect/ResetAfterReserve", func(t *testing.T) {
		in := openInspector(t, f)
		rs, ok := in.(ratelimit.Reserver)
		if !ok {
			t.Skip("the store is not a ratelimit.Reserver")
		}
		testResetAfterReserve(t, in, rs)
	})
	t.Run("Inspect/Leases", func(t *testing.T) {
		ls, ok := open(t, f).(ratelimit.LeaseInspector)
		if !ok {
			t.Skip("the store is not a ratelimit.LeaseInspector")
		}
		testInspectLeases(t, ls)
	})
}

func openInspector(t *testing.T, f Factory) ratelimit.Inspector {
	t.Helper()
	in, ok := open(t, f).(ratelimit.Inspector)
	if !ok {
		t.Skip("the store is not a ratelimit.Inspector")
	}
	return in
}

// wantCounters inspects r and compares (start offset, current, previous)
// of each limit.
func wantCounters(t *testing.T, s ratelimit.Inspector, r ratelimit.Request, want [][3]int64) {
	t.Helper()
	got, err := s.Inspect(context.Background(), r)
	if err != nil {
		t.Fatalf("Inspect at t0+%s: %v", r.Now.Sub(T0), err)
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect at t0+%s: %d counters, want %d", r.Now.Sub(T0), len(got), len(want))
	}
	for i, c := range got {
		g := [3]int64{int64(c.Start.Sub(T0) / time.Millisecond), c.Current, c.Previous}
		if c.Limit != r.Limits[i] || g != want[i] {
			t.Errorf("Inspect at t0+%s, limit %d (%s): start t0+%dms current %d previous %d, want start t0+%dms current %d previous %d",
				r.Now.Sub(T0), i, c.Limit, g[0], g[1], g[2], want[i][0], want[i][1], want[i][2])
		}
	}
}

func take(t *testing.T, s ratelimit.Store, r ratelimit.Request, want bool) {
	t.Helper()
	d, err := s.Take(context.Background(), r)
	if err != nil || d.Allowed != want {
		t.Fatalf("Take at t0+%s: %s, %v; want allowed %v", r.Now.Sub(T0), describe(&d), err, want)
	}
}

// testInspectWindows: Inspect reports the counts of the current and the
// previous window without counting; Reset clears every window of the key
// and only that key.
func testInspectWindows(t *testing.T, s ratelimit.Inspector) {
	ctx := context.Background()
	limits := []ratelimit.Limit{ratelimit.PerSecond(10), ratelimit.PerMinute(3).Fixed()}
	r := ratelimit.Request{Key: "k", Limits: limits, Now: At(0)}
	wantCounters(t, s, r, [][3]int64{{0, 0, 0}, {0, 0, 0}})
	take(t, s, r, true)
	take(t, s, r, true)
	other := r
	other.Key = "other"
	take(t, s, other, true)
	wantCounters(t, s, r, [][3]int64{{0, 2, 0}, {0, 2, 0}})
	r.Now = At(sec + 500*ms)
	wantCounters(t, s, r, [][3]int64{{1000, 0, 2}, {0, 2, 0}})
	wantCounters(t, s, r, [][3]int64{{1000, 0, 2}, {0, 2, 0}}) // unchanged by inspecting
	take(t, s, r, true)
	take(t, s, r, false) // the minute's fourth
	if err := s.Reset(ctx, r); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	wantCounters(t, s, r, [][3]int64{{1000, 0, 0}, {0, 0, 0}})
	for range 3 {
		take(t, s, r, true)
	}
	take(t, s, r, false)
	other.Now = r.Now
	wantCounters(t, s, other, [][3]int64{{1000, 0, 1}, {0, 1, 0}}) // another key keeps its counts
	if err := s.Reset(ctx, ratelimit.Request{Key: "never", Limits: limits, Now: r.Now}); err != nil {
		t.Fatalf("Reset of a key without counters: %v", err)
	}
}

// testResetAfterReserve: Reset clears the units reserved in later windows
// too, so the next call starts from zero.
func testResetAfterReserve(t *testing.T, in ratelimit.Inspector, rs ratelimit.Reserver) {
	ctx := context.Background()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(2).Fixed()}, Now: At(0)}
	// Four units: two in this window, two reserved in the next.
	for i, want := range []time.Duration{0, 0, sec, sec} {
		b, err := rs.Reserve(ctx, r, ratelimit.InfDuration)
		if i == 0 && errors.Is(err, ratelimit.ErrReserveUnsupported) {
			t.Skipf("the store cannot reserve: %v", err)
		}
		if err != nil || !b.OK || !b.At.Equal(At(want)) {
			t.Fatalf("Reserve %d: %+v, %v; want a unit at t0+%s", i, b, err, want)
		}
	}
	if err := in.Reset(ctx, r); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	r.Now = At(sec + 100*ms)
	take(t, in, r, true)
	take(t, in, r, true)
	take(t, in, r, false)
}

// testInspectBucket: a token bucket reports its theoretical arrival time.
func testInspectBucket(t *testing.T, s ratelimit.Inspector) {
	ctx := context.Background()
	limits := []ratelimit.Limit{ratelimit.PerSecond(10).TokenBucket(5)}
	r := ratelimit.Request{Key: "k", Limits: limits, Now: At(0), Cost: 3}
	if _, err := s.Take(ctx, r); errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Skip("the store holds no token buckets: ", err)
	} else if err != nil {
		t.Fatalf("Take: %v", err)
	}
	got, err := s.Inspect(ctx, r)
	if err != nil || len(got) != 1 || !got[0].Start.Equal(At(300*ms)) || got[0].Empty(r.Now) {
		t.Fatalf("Inspect: %+v, %v; want the bucket full again at t0+300ms", got, err)
	}
	if err := s.Reset(ctx, r); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	got, err = s.Inspect(ctx, r)
	if err != nil || len(got) != 1 || !got[0].Empty(r.Now) {
		t.Fatalf("Inspect after Reset: %+v, %v; want a full bucket", got, err)
	}
	r.Cost = 5
	take(t, s, r, true)
}

// testInspectLeases: Leases lists the live leases with their expiry;
// ResetLeases frees every slot.
func testInspectLeases(t *testing.T, s ratelimit.LeaseInspector) {
	ctx := context.Background()
	for i, id := range []string{"a", "b"} {
		l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: id, Max: 2, TTL: minute, Now: At(time.Duration(i) * sec)})
		if err != nil || !l.Allowed {
			t.Fatalf("Acquire %s: %+v, %v", id, l, err)
		}
	}
	got, err := s.Leases(ctx, "k", At(2*sec))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	slices.SortFunc(got, func(a, b ratelimit.LeaseState) int { return a.Expires.Compare(b.Expires) })
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" ||
		!got[0].Expires.Equal(At(minute)) || !got[1].Expires.Equal(At(minute+sec)) {
		t.Fatalf("Leases = %+v; want a until t0+1m and b until t0+1m1s", got)
	}
	if got, err := s.Leases(ctx, "k", At(minute+sec/2)); err != nil || len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("Leases after a lapsed = %+v, %v; want b only", got, err)
	}
	if err := s.ResetLeases(ctx, "k"); err != nil {
		t.Fatalf("ResetLeases: %v", err)
	}
	if got, err := s.Leases(ctx, "k", At(2*sec)); err != nil || len(got) != 0 {
		t.Fatalf("Leases after ResetLeases = %+v, %v; want none", got, err)
	}
	l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: "c", Max: 1, TTL: minute, Now: At(2 * sec)})
	if err != nil || !l.Allowed || l.Active != 1 {
		t.Fatalf("Acquire after ResetLeases: %+v, %v; want allowed, 1 active", l, err)
	}
}
