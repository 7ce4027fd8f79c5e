package storekit

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
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

func run(t *testing.T, limits []ratelimit.Limit, penalty bool, steps []step) []Counter {
	t.Helper()
	cs := make([]Counter, len(limits))
	for i, s := range steps {
		r := ratelimit.Request{Key: "k", Limits: limits, Cost: s.cost, Now: at(s.t), Penalty: penalty}
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
	l := []ratelimit.Limit{ratelimit.Every(10, time.Minute)}
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
	l := []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}
	run(t, l, false, []step{
		{t: 0, allowed: true, remaining: []int64{1}},
		{t: time.Minute - time.Nanosecond, allowed: true, remaining: []int64{0}},
		{t: time.Minute - time.Nanosecond, allowed: false, remaining: []int64{0}},
		{t: time.Minute, allowed: true, remaining: []int64{1}},
	})
}

func TestPenaltyKeepsDeniedCounted(t *testing.T) {
	l := []ratelimit.Limit{ratelimit.PerMinute(1)}
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
	l := []ratelimit.Limit{ratelimit.PerSecond(10).TokenBucket(5)}
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
	l := []ratelimit.Limit{ratelimit.PerMinute(10)}
	cs := make([]Counter, 1)
	for range 10 {
		r := ratelimit.Request{Limits: l, Now: at(0)}
		Apply(&r, cs)
	}
	r := ratelimit.Request{Limits: l, Now: at(0)}
	d := Apply(&r, cs)
	if d.Allowed || d.RetryAfter <= time.Minute {
		t.Fatalf("decision %+v", d)
	}
	r.Now = at(d.RetryAfter)
	if d2 := Apply(&r, cs); !d2.Allowed {
		t.Fatalf("denied at RetryAfter %s", d.RetryAfter)
	}
}

// normalize returns cs as of t0+now with no call made: windows rolled to
// now, bucket TATs not before now. Two counters that normalize alike decide
// every later call alike.
func normalize(ls []ratelimit.Limit, cs []Counter, now time.Duration) []Counter {
	out := slices.Clone(cs)
	ns := at(now).UnixNano()
	for i := range ls {
		if ls[i].Algorithm == ratelimit.TokenBucket {
			out[i].Start = max(out[i].Start, ns/int64(time.Microsecond))
		} else {
			roll(&out[i], &ls[i], ns/int64(time.Millisecond))
		}
	}
	return out
}

// fuzzBytes hands out a fuzzer's bytes one at a time, then zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() int {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return int(v)
}

// FuzzApply drives Apply with random limits, costs and time steps and
// checks what must hold whatever the input:
//   - it never panics, and a decision has one state per limit;
//   - an allowed call has no RetryAfter and no denying limit;
//   - a cost above a limit's capacity is denied with RetryAfter ratelimit.InfDuration;
//   - Remaining is within 0..Capacity;
//   - a denied call without Penalty leaves every counter as it was;
//   - a fixed window never admits more than Count in one window;
//   - a token bucket never admits more than Burst + Count×T/Window in any
//     interval T;
//   - RetryAfter is exact: the same call is allowed RetryAfter later and
//     denied a nanosecond before.
func FuzzApply(f *testing.F) {
	f.Add([]byte{1, 1, 3, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, false)
	f.Add([]byte{3, 0, 9, 1, 2, 1, 5, 3, 2, 7, 0, 4, 4, 1, 1, 0, 0, 8, 8}, true)
	f.Add([]byte{2, 2, 4, 0, 7, 1, 0, 1, 200, 0, 0, 3, 3, 9, 9}, false)
	// A fixed 5/s limit; one call, then one of cost MaxInt64 counted with
	// Penalty, then more calls in the same second.
	f.Add([]byte{0, 1, 4, 0, 0, 1, 0, 7, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, true)
	windows := []time.Duration{time.Second, 2 * time.Second, time.Minute, 1500 * time.Millisecond, 7 * time.Millisecond, 100 * 365 * 24 * time.Hour}
	steps := []time.Duration{0, 1, 7, 100, 999, 1000, 1001, 30_000, 60_000, 61_000}
	f.Fuzz(func(t *testing.T, data []byte, penalty bool) {
		b := fuzzBytes(data)
		limits := make([]ratelimit.Limit, 1+b.next()%3)
		for i := range limits {
			limits[i] = ratelimit.Limit{
				Algorithm: ratelimit.Algorithm(b.next() % 3),
				Count:     int64(1 + b.next()%20),
				Window:    windows[b.next()%len(windows)],
			}
			if limits[i].Algorithm == ratelimit.TokenBucket {
				limits[i].Burst = int64(b.next() % 25)
			}
		}
		cs := make([]Counter, len(limits))
		type hit struct {
			at   time.Duration
			cost int64
		}
		admitted := make([][]hit, len(limits))
		now := time.Duration(0)
		for step := 0; len(b) > 0 && step < 64; step++ {
			now += steps[b.next()%len(steps)] * time.Millisecond
			cost := int64(b.next() % 8) // 0 means 1; 6 may exceed a capacity
			if cost == 7 {
				cost = math.MaxInt64 // must not overflow a counter
			}
			r := ratelimit.Request{Key: "k", Limits: limits, Cost: cost, Now: at(now), Penalty: penalty}
			if cost == 0 {
				cost = 1
			}
			before := slices.Clone(cs)
			fast := slices.Clone(cs)
			ok := TryAllow(&r, fast)
			d := Apply(&r, cs)
			where := func() string { return fmt.Sprintf("step %d (t0+%s, cost %d, limits %v)", step, now, cost, limits) }
			if ok != d.Allowed {
				t.Fatalf("%s: TryAllow = %v, Apply allowed %v", where(), ok, d.Allowed)
			}
			if !ok {
				if fd := Apply(&r, fast); fd.Allowed || fd.Denied != d.Denied || fd.RetryAfter != d.RetryAfter {
					t.Fatalf("%s: Apply after a failed TryAllow = %+v, want %+v", where(), fd, d)
				}
			}
			if !slices.Equal(fast, cs) {
				t.Fatalf("%s: counters after the allow-only path %v, after Apply %v", where(), fast, cs)
			}
			if d.Len() != len(limits) {
				t.Fatalf("%s: %d states", where(), d.Len())
			}
			if d.Allowed && (d.RetryAfter != 0 || d.Denied != -1) {
				t.Fatalf("%s: allowed with RetryAfter %s, Denied %d", where(), d.RetryAfter, d.Denied)
			}
			if !d.Allowed && !d.State(d.Denied).Exceeded {
				t.Fatalf("%s: denied by limit %d, which is not exceeded", where(), d.Denied)
			}
			for i, l := range limits {
				s := d.State(i)
				if cost > l.Capacity() && (d.Allowed || d.RetryAfter != ratelimit.InfDuration) {
					t.Fatalf("%s: cost above capacity %d gave %+v", where(), l.Capacity(), d)
				}
				if s.Reset < 0 {
					t.Fatalf("%s: limit %d Reset %s is negative", where(), i, s.Reset)
				}
				if s.Remaining < 0 || s.Remaining > l.Capacity() {
					t.Fatalf("%s: limit %d Remaining %d outside 0..%d", where(), i, s.Remaining, l.Capacity())
				}
			}
			if !d.Allowed && !penalty && !slices.Equal(normalize(limits, before, now), normalize(limits, cs, now)) {
				t.Fatalf("%s: denied call changed counters %v to %v", where(), before, cs)
			}
			if d.Allowed {
				for i := range limits {
					admitted[i] = append(admitted[i], hit{now, cost})
				}
			}
			// A wait of ratelimit.InfDuration-1 is saturated (a centuries-deep bucket):
			// not exact by design. And time in nanoseconds ends in 2262.
			if !d.Allowed && d.RetryAfter < ratelimit.InfDuration-1 && !at(now).Add(d.RetryAfter).After(time.Unix(0, math.MaxInt64)) {
				probe := func(after time.Duration) bool {
					r := r
					r.Now = at(now + after)
					return Apply(&r, slices.Clone(cs)).Allowed
				}
				if !probe(d.RetryAfter) {
					t.Fatalf("%s: denied %s later, though RetryAfter said so", where(), d.RetryAfter)
				}
				if probe(d.RetryAfter - 1) {
					t.Fatalf("%s: already allowed 1ns before RetryAfter %s", where(), d.RetryAfter)
				}
			}
		}
		for i, l := range limits {
			hs := admitted[i]
			switch l.Algorithm {
			case ratelimit.FixedWindow:
				per := map[int64]int64{}
				for _, h := range hs {
					w := at(h.at).UnixMilli() / l.Window.Milliseconds()
					if per[w] += h.cost; per[w] > l.Count {
						t.Fatalf("fixed %s admitted %d in one window", l, per[w])
					}
				}
			case ratelimit.TokenBucket:
				for a := range hs {
					var sum int64
					for z := a; z < len(hs); z++ {
						sum += hs[z].cost
						if bound := l.Capacity() + l.Count*int64(hs[z].at-hs[a].at)/int64(l.Window); sum > bound {
							t.Fatalf("bucket %s admitted %d within %s, bound %d", l, sum, hs[z].at-hs[a].at, bound)
						}
					}
				}
			}
		}
	})
}

// A bucket refilled once a century holds centuries of waiting: durations
// saturate instead of overflowing.
func TestCenturyBucketDoesNotOverflow(t *testing.T) {
	l := []ratelimit.Limit{{Algorithm: ratelimit.TokenBucket, Count: 1, Window: 100 * 365 * 24 * time.Hour, Burst: 10}}
	cs := make([]Counter, 1)
	for i := range 11 {
		r := ratelimit.Request{Limits: l, Now: at(0)}
		d := Apply(&r, cs)
		if d.Allowed != (i < 10) {
			t.Fatalf("call %d: allowed %v", i, d.Allowed)
		}
		s := d.State(0)
		if s.Reset < 0 || d.RetryAfter < 0 || (!d.Allowed && d.RetryAfter < 100*365*24*time.Hour) {
			t.Fatalf("call %d: Reset %s, RetryAfter %s", i, s.Reset, d.RetryAfter)
		}
	}
}
