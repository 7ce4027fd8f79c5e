package ratelimit

import (
	"testing"
	"time"
)

// t0 is an epoch-aligned instant: every window of a whole number of seconds
// that divides an hour starts here.
var t0 = time.Unix(1_700_000_000-1_700_000_000%3600, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one call on a timeline and what it must return.
type step struct {
	t         time.Duration
	cost      int64
	allowed   bool
	remaining []int64 // per limit; nil: not checked
}

func run(t *testing.T, limits []Limit, penalty bool, steps []step) []Counter {
	t.Helper()
	cs := make([]Counter, len(limits))
	for i, s := range steps {
		r := Request{Key: "k", Limits: limits, Cost: s.cost, Now: at(s.t), Penalty: penalty}
		d := Apply(&r, cs)
		if d.Allowed != s.allowed {
			t.Fatalf("step %d (t=%s): allowed = %v, want %v", i, s.t, d.Allowed, s.allowed)
		}
		for j, want := range s.remaining {
			if got := d.State(j).Remaining; got != want {
				t.Fatalf("step %d (t=%s): limit %d remaining = %d, want %d", i, s.t, j, got, want)
			}
		}
	}
	return cs
}

func TestSlidingKongExample(t *testing.T) {
	l := []Limit{Every(10, time.Minute)}
	six := func(then step) []step {
		var st []step
		for i := range 6 {
			st = append(st, step{t: 90 * time.Second, allowed: true, remaining: []int64{int64(9 - i)}})
		}
		return append(st, then)
	}
	run(t, l, false, six(step{t: 150 * time.Second, allowed: true, remaining: []int64{6}}))
	run(t, l, false, six(step{t: 130 * time.Second, allowed: true, remaining: []int64{4}}))
}

func TestFixedWindowEdges(t *testing.T) {
	l := []Limit{PerMinute(2).Fixed()}
	run(t, l, false, []step{
		{t: 0, allowed: true, remaining: []int64{1}},
		{t: time.Minute - time.Nanosecond, allowed: true, remaining: []int64{0}},
		{t: time.Minute - time.Nanosecond, allowed: false, remaining: []int64{0}},
		{t: time.Minute, allowed: true, remaining: []int64{1}},
	})
}

func TestPenaltyKeepsDeniedCounted(t *testing.T) {
	l := []Limit{PerMinute(1)}
	cs := run(t, l, true, []step{
		{t: 0, allowed: true},
		{t: time.Second, allowed: false},
		{t: 2 * time.Second, allowed: false},
	})
	if cs[0].Cur != 3 {
		t.Fatalf("cur = %d, want 3 (denied calls counted)", cs[0].Cur)
	}
	cs = run(t, l, false, []step{
		{t: 0, allowed: true},
		{t: time.Second, allowed: false},
	})
	if cs[0].Cur != 1 {
		t.Fatalf("cur = %d, want 1 (all or nothing)", cs[0].Cur)
	}
}

func TestTokenBucket(t *testing.T) {
	l := []Limit{PerSecond(10).TokenBucket(5)}
	run(t, l, false, []step{
		{t: 0, allowed: true, remaining: []int64{4}},
		{t: 0, cost: 4, allowed: true, remaining: []int64{0}},
		{t: 0, allowed: false, remaining: []int64{0}},
		{t: 100 * time.Millisecond, allowed: true, remaining: []int64{0}},
		{t: 600 * time.Millisecond, cost: 5, allowed: true, remaining: []int64{0}},
		{t: 600 * time.Millisecond, cost: 6, allowed: false},
	})
}

func TestRetryAfterSliding(t *testing.T) {
	l := []Limit{PerMinute(10)}
	cs := make([]Counter, 1)
	for range 10 {
		r := Request{Limits: l, Now: at(0)}
		Apply(&r, cs)
	}
	r := Request{Limits: l, Now: at(0)}
	d := Apply(&r, cs)
	if d.Allowed || d.RetryAfter <= time.Minute {
		t.Fatalf("decision %+v", d)
	}
	r.Now = at(d.RetryAfter)
	if d2 := Apply(&r, cs); !d2.Allowed {
		t.Fatalf("denied at RetryAfter %s", d.RetryAfter)
	}
}
