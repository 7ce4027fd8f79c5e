package storekit

// Reservations follow the rules in package ratelimit's reserve.go. Times
// here are Unix microseconds; window edges are whole milliseconds.
//
// Each limit has an earliest moment at or after a candidate t at which it
// admits the cost (earliest). The reserved moment is the least t that every
// limit admits: starting from now, t moves to the latest of the limits'
// earliest moments until none moves it. Every earliest moment is at least
// t and grows with t, so this ends, within a few rounds, at the least
// common moment.

import (
	"math"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Reserve decides r as a reservation against cs, the counters of r.Limits in
// the same order, and updates them when it is OK: the units are taken at
// the earliest moment, at most maxDelay after r.Now, at which every limit
// admits them (ratelimit.InfDuration for no bound). r.Now must be set and
// r.Limits valid; r.Cost zero means 1.
// Reserve is pure: the whole answer is a function of its arguments.
func Reserve(r *ratelimit.Request, maxDelay time.Duration, cs []Counter) ratelimit.Booking {
	cost := max(r.Cost, 1)
	nowNs := r.Now.UnixNano()
	nowUs := floorDiv(nowNs, int64(time.Microsecond))
	nowMs := floorDiv(nowNs, int64(time.Millisecond))
	for i := range r.Limits {
		l := &r.Limits[i]
		if cost > l.Capacity() {
			return ratelimit.Booking{}
		}
		if l.Algorithm != ratelimit.TokenBucket {
			roll(&cs[i], l, nowMs)
		}
	}

	t := nowUs
	for round := 0; ; round++ {
		next := t
		for i := range r.Limits {
			e, retry, ok := earliest(&r.Limits[i], &cs[i], cost, t)
			if !ok {
				return ratelimit.Booking{At: r.Now.Add(time.Duration(retry*1000 - nowNs))}
			}
			next = max(next, e)
		}
		if next == t {
			break
		}
		t = next
		if round > 4*len(r.Limits)+4 { // cannot happen: each limit moves t a few times at most
			return ratelimit.Booking{At: r.Now.Add(time.Duration(t*1000 - nowNs))}
		}
	}
	at := r.Now // keeps r.Now's location and monotonic reading
	if t > nowUs {
		at = r.Now.Add(time.Duration(t*1000 - nowNs))
	}
	if at.Sub(r.Now) > maxDelay {
		return ratelimit.Booking{At: at}
	}

	marks := make([]int64, len(r.Limits))
	tMs := floorDiv(t, 1000)
	for i := range r.Limits {
		l := &r.Limits[i]
		c := &cs[i]
		if l.Algorithm == ratelimit.TokenBucket {
			c.Start = max(c.Start, t) + satMul(cost, Emission(l))
			marks[i] = c.Start
			continue
		}
		w := int64(l.Window / time.Millisecond)
		if tMs < c.Start+w {
			c.Cur = satAdd(c.Cur, cost)
			marks[i] = c.Start
		} else {
			c.Next = satAdd(c.Next, cost)
			marks[i] = c.Start + w
		}
	}
	return ratelimit.Booking{OK: true, At: at, Marks: marks}
}

// earliest returns the earliest moment at or after t (Unix us) at which l
// admits cost, given its counter c rolled to the reservation's time. When
// there is none within l's horizon it reports false, with the moment the
// horizon moves.
func earliest(l *ratelimit.Limit, c *Counter, cost, t int64) (e, retry int64, ok bool) {
	if l.Algorithm == ratelimit.TokenBucket {
		// Admitted at t iff max(TAT, t) + cost*T - t <= tau.
		tau := satMul(l.Capacity(), Emission(l))
		return max(t, c.Start+satMul(cost, Emission(l))-tau), 0, true
	}
	w := int64(l.Window / time.Millisecond)
	tMs := floorDiv(t, 1000)
	next := c.Start + w
	if tMs < next {
		if e, ok := admitsIn(l, c.Start, c.Cur, c.Prev, cost, tMs); ok {
			return max(t, e*1000), 0, true
		}
	}
	if tMs < next+w {
		// Calls still allowed in the current window may fill it: it weighs
		// on the next one as if it ended full.
		if e, ok := admitsIn(l, next, c.Next, max(c.Cur, l.Count), cost, tMs); ok {
			return max(t, e*1000), 0, true
		}
	}
	return 0, next * 1000, false
}

// admitsIn returns the first millisecond, not before fromMs, of the window
// starting at start (count cur, previous count prev) at which l admits
// cost, if there is one.
func admitsIn(l *ratelimit.Limit, start, cur, prev, cost, fromMs int64) (int64, bool) {
	w := int64(l.Window / time.Millisecond)
	free := l.Count - cost - cur // cost <= Count: no overflow
	if free < 0 {
		return 0, false
	}
	e := max(fromMs-start, 0)
	if l.Algorithm == ratelimit.SlidingWindow && prev > 0 {
		// cur + cost + prev*(w-e)/w <= Count  <=>  w-e <= free*w/prev
		if most := mul(uint64(free), uint64(w)).div(uint64(prev)); most < uint64(w) {
			e = max(e, w-int64(most))
		}
	}
	if e >= w {
		return 0, false
	}
	return start + e, true
}

// Unreserve gives back what b, the answer of Reserve for r's key, limits
// and cost, took, from cs (the counters of r.Limits in the same order),
// as far as it still can at r.Now: nothing once r.Now is after b.At or
// when b is not OK. A window count drops by the cost; a token bucket's TAT
// moves back by the cost less what was taken after b. r.Now must be set.
func Unreserve(r *ratelimit.Request, b ratelimit.Booking, cs []Counter) {
	if !b.OK || r.Now.After(b.At) || len(b.Marks) != len(r.Limits) {
		return
	}
	cost := max(r.Cost, 1)
	nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
	for i := range r.Limits {
		l := &r.Limits[i]
		c := &cs[i]
		m := b.Marks[i]
		if l.Algorithm == ratelimit.TokenBucket {
			inc := satMul(cost, Emission(l))
			if back := min(inc-(c.Start-m), inc); back > 0 {
				c.Start -= back
			}
			continue
		}
		roll(c, l, nowMs)
		w := int64(l.Window / time.Millisecond)
		switch m {
		case c.Start:
			c.Cur -= min(cost, max(c.Cur, 0))
		case c.Start + w:
			c.Next -= min(cost, max(c.Next, 0))
		case c.Start - w:
			c.Prev -= min(cost, max(c.Prev, 0))
		}
	}
}

// satAdd returns a+b for non-negative b, saturating at MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
