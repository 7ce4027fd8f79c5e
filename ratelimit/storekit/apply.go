package storekit

// NOTE on what counts as a hit. This file is the one statement of the
// algorithms' math; the Redis scripts mirror it line for line and the
// conformance suite (package ratelimittest) keeps the two in step.
//
// Time. Window algorithms work in whole milliseconds since the Unix epoch,
// as Kong does (ngx.now()). A window of length W starts at
// floor(now/W)*W: windows are aligned to the epoch, not to the first hit, so
// a 60 s window always starts at second :00 of a minute. Token buckets work
// in whole microseconds, so rates up to a million per second stay exact
// (Limit.Validate refuses faster ones).
//
// Fixed window. The count of the current window, including this call's
// cost, is compared with Count: a call is denied iff count > Count. With a
// cost of 1, calls 1..Count pass and call Count+1 is denied.
//
// Sliding window. rate = cur + prev * (W - e) / W, where cur is the count of
// the current window including this call's cost, prev the count of the
// previous window and e the milliseconds elapsed in the current window. A
// call is denied iff rate > Count. The comparison is exact rational
// arithmetic on integers (Kong compares floats and can be off by one ulp;
// we are not).
//
// Token bucket (GCRA). One timestamp per key, the theoretical arrival time
// TAT. The emission interval T is W/Count rounded up to a whole
// microsecond, so the bucket never refills faster than Count per W. A call
// of cost n moves TAT to max(TAT, now) + n*T and is allowed iff the new TAT
// is at most now + Burst*T. Measuring the depth in the same rounded unit
// keeps a full bucket worth exactly Burst calls.
//
// Several limits. Limits are evaluated in request order. Until one denies,
// each limit has the cost added (tentatively) and is checked. Once a limit
// has denied, the remaining limits are only read, never added to; like Kong,
// a read uses the sliding weight even for a fixed window (it only changes
// the reported Remaining of those later limits). The call is allowed iff no
// limit denies. If allowed, every limit keeps the cost. If denied, with
// Request.Penalty the window limits up to and including the denying one
// keep the cost (Kong's default); without it nothing is kept (all or
// nothing). A token bucket is never charged for a denied call.
//
// Cost larger than capacity. A call whose cost exceeds some limit's
// capacity (Count, or Burst for a bucket) is denied with RetryAfter =
// InfDuration, and, with Penalty, still counted like any denied call.

import (
	"math"
	"math/bits"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Counter is the stored state of one limit for one key. Stores keep one per
// (key, CounterID) and treat it as opaque; only Apply interprets it.
//
// For window algorithms Start is the start of the current window in Unix
// milliseconds, Cur its count, Prev the count of the window before it and
// Next the units reserved in the window after it (see Reserve). For a token
// bucket Start is the TAT in Unix microseconds and Cur, Prev, Next are
// unused. The zero Counter is empty.
type Counter struct {
	Start int64
	Cur   int64
	Prev  int64
	Next  int64
}

// CounterID identifies the counter a limit uses within a key. Fixed and
// sliding limits of the same window share one counter, as Kong's windows
// do, so switching window_type keeps the counts; a token bucket has its
// own.
func CounterID(l ratelimit.Limit) uint64 {
	id := uint64(l.Window/time.Millisecond) << 1
	if l.Algorithm == ratelimit.TokenBucket {
		id |= 1
	}
	return id
}

// Expiry returns the Unix time in nanoseconds after which c no longer
// affects any decision for l and may be dropped.
func (c Counter) Expiry(l ratelimit.Limit) int64 {
	if l.Algorithm == ratelimit.TokenBucket {
		return c.Start * int64(time.Microsecond)
	}
	w := int64(l.Window / time.Millisecond)
	if c.Next != 0 {
		return (c.Start + 3*w) * int64(time.Millisecond)
	}
	return (c.Start + 2*w) * int64(time.Millisecond)
}

// Apply decides r against cs, the counters of r.Limits in the same order,
// and updates them. r.Now must be set and r.Limits valid (see
// ValidateLimits); r.Cost zero means 1. Apply is pure: the whole decision
// is a function of its arguments.
func Apply(r *ratelimit.Request, cs []Counter) ratelimit.Decision {
	allowed, denied := true, -1
	var retry time.Duration
	var ss states
	ss.Grow(len(r.Limits))
	cost := r.Cost
	if cost <= 0 {
		cost = 1
	}
	nowNs := r.Now.UnixNano()
	nowMs := floorDiv(nowNs, int64(time.Millisecond))
	nowUs := floorDiv(nowNs, int64(time.Microsecond))

	// Window counts before this call (after rolling to now), to undo an
	// addition exactly even when it saturated.
	var before [inlineStates]int64
	beforeAt := before[:]
	if len(r.Limits) > inlineStates {
		beforeAt = make([]int64, len(r.Limits))
	}
	for i := range r.Limits {
		l := &r.Limits[i]
		c := &cs[i]
		s := ss.At(i)
		if l.Algorithm == ratelimit.TokenBucket {
			wait := takeBucket(l, c, nowUs, cost, denied < 0, s)
			retry = max(retry, wait)
		} else {
			roll(c, l, nowMs)
			beforeAt[i] = c.Cur
			takeWindow(l, c, nowMs, nowNs, cost, denied < 0, s)
		}
		if s.Exceeded && denied < 0 {
			allowed = false
			denied = i
		}
	}
	if allowed {
		return newDecision(true, -1, 0, ss)
	}

	// Undo the tentative additions that a denied call does not keep, then
	// say how long the windows need, as they stand, to admit the cost.
	for i := range r.Limits {
		l := &r.Limits[i]
		st := ss.At(i)
		if st.Counted && (l.Algorithm == ratelimit.TokenBucket || !r.Penalty) {
			if l.Algorithm == ratelimit.TokenBucket {
				cs[i].Start -= satMul(cost, Emission(l))
			} else {
				cs[i].Cur = beforeAt[i]
			}
			st.Counted = false
		}
		if l.Algorithm != ratelimit.TokenBucket {
			c := &cs[i]
			retry = max(retry, windowWait(l, c.Start, c.Cur, c.Prev, nowMs, nowNs, cost))
		}
	}
	return newDecision(false, denied, retry, ss)
}

// roll moves c to the window that contains nowMs, the units reserved in
// the window after the old one becoming its count. A clock that steps back
// into an older window keeps counting in the newest one: that can only
// deny more, never admit more.
func roll(c *Counter, l *ratelimit.Limit, nowMs int64) {
	w := int64(l.Window / time.Millisecond)
	if e := nowMs - c.Start; e >= 0 && e < w {
		return // c.Start is a window start (or 0), so nowMs is in c's window
	}
	start := nowMs - floorMod(nowMs, w)
	switch {
	case c.Start == start || start < c.Start:
		return
	case c.Start == start-w:
		c.Prev, c.Cur = c.Cur, c.Next
	case c.Start == start-2*w:
		c.Prev, c.Cur = c.Next, 0
	default:
		c.Prev, c.Cur = 0, 0
	}
	c.Next = 0
	c.Start = start
}

// takeWindow evaluates a fixed or sliding limit. When add is true the cost
// is added to c.Cur (tentatively; Apply undoes it if needed).
func takeWindow(l *ratelimit.Limit, c *Counter, nowMs, nowNs, cost int64, add bool, s *ratelimit.LimitState) {
	w := int64(l.Window / time.Millisecond)
	e := nowMs - c.Start // ms elapsed in the window; negative after a clock step back
	if e < 0 {
		e = 0
	}
	rem := w - e // weight numerator of the previous window, in 1..w
	windowEnd := time.Duration((c.Start+w)*int64(time.Millisecond) - nowNs)
	*s = ratelimit.LimitState{Limit: *l}
	cur := c.Cur
	if add {
		if cur > math.MaxInt64-cost { // saturate: a count past MaxInt64 is over any limit
			cur = math.MaxInt64
		} else {
			cur += cost
		}
		c.Cur = cur
		s.Counted = true
	}
	sliding := l.Algorithm == ratelimit.SlidingWindow || !add // a read uses the sliding weight (Kong)
	if sliding {
		// total/w is the rate; compare total with Count*w exactly.
		total := mul(uint64(cur), uint64(w)).add(mul(uint64(c.Prev), uint64(rem)))
		limit := mul(uint64(l.Count), uint64(w))
		s.Used = total.float() / float64(w)
		if total.cmp(limit) > 0 {
			s.Exceeded = true
			over := (s.Used - float64(l.Count)) / float64(l.Count) * float64(l.Window)
			if over >= float64(ratelimit.InfDuration-windowEnd) { // a huge penalty: never clear
				s.Reset = ratelimit.InfDuration
			} else {
				s.Reset = windowEnd + time.Duration(over)
			}
		} else {
			s.Remaining = int64(limit.sub(total).div(uint64(w)))
			s.Reset = windowEnd
		}
	} else {
		s.Used = float64(cur)
		s.Exceeded = cur > l.Count
		if !s.Exceeded {
			s.Remaining = l.Count - cur
		}
		s.Reset = windowEnd
	}
}

// windowWait returns how long until a call of cost would pass l, given the
// counts of the window starting at start (Unix ms) and of the one before,
// and no other traffic.
func windowWait(l *ratelimit.Limit, start, cur, prev, nowMs, nowNs, cost int64) time.Duration {
	if cost > l.Count {
		return ratelimit.InfDuration
	}
	w := int64(l.Window / time.Millisecond)
	at := func(ms int64) time.Duration { // wait until the absolute millisecond ms
		d := time.Duration(ms*int64(time.Millisecond) - nowNs)
		if d < 0 {
			return 0
		}
		return d
	}
	if l.Algorithm == ratelimit.FixedWindow {
		if cur <= l.Count-cost {
			return 0
		}
		return at(start + w)
	}
	// Sliding: find the first millisecond at which cur + cost + prev*rem/w <= Count.
	e := nowMs - start
	if e < 0 {
		e = 0
	}
	if free := (l.Count - cost) - cur; free >= 0 { // cost <= Count: no overflow
		if prev == 0 {
			return 0
		}
		// rem <= free*w/prev
		need := mul(uint64(free), uint64(w)).div(uint64(prev))
		if need >= uint64(w-e) {
			return 0
		}
		if need >= 1 {
			return at(start + w - int64(need))
		}
	}
	// Next window: its previous count is cur.
	next := start + w
	if cur == 0 {
		return at(next)
	}
	need := mul(uint64(l.Count-cost), uint64(w)).div(uint64(cur))
	if need >= uint64(w) {
		return at(next)
	}
	if need >= 1 {
		return at(next + w - int64(need))
	}
	return at(next + w)
}

// takeBucket evaluates a token bucket. When add is true and the call fits,
// the TAT moves (tentatively; Apply undoes it if the call is denied).
func takeBucket(l *ratelimit.Limit, c *Counter, nowUs, cost int64, add bool, s *ratelimit.LimitState) time.Duration {
	burst := l.Capacity()
	t := Emission(l)
	tau := satMul(burst, t) // bucket depth in µs
	tat := max(c.Start, nowUs)
	*s = ratelimit.LimitState{Limit: *l}
	var wait time.Duration
	newTAT := tat
	if cost > burst {
		s.Exceeded = add
		wait = ratelimit.InfDuration
	} else {
		inc := satMul(cost, t)
		if ahead := tat + inc - nowUs; ahead > tau {
			s.Exceeded = add
			wait = micros(ahead - tau)
		} else if add {
			newTAT = tat + inc
			c.Start = newTAT
			s.Counted = true
		}
	}
	if slack := nowUs + tau - newTAT; slack > 0 {
		s.Remaining = min(slack/t, burst)
	}
	s.Used = float64(burst - s.Remaining)
	s.Reset = max(micros(newTAT-nowUs), 0)
	return wait
}

// micros converts microseconds to a Duration, saturating just below
// ratelimit.InfDuration: a bucket deep enough to overflow a Duration (centuries)
// still answers with a finite wait.
func micros(us int64) time.Duration {
	if us > (math.MaxInt64-1)/int64(time.Microsecond) {
		return ratelimit.InfDuration - 1
	}
	return time.Duration(us) * time.Microsecond
}

// Emission returns a token bucket's emission interval T: the microseconds
// one unit takes to refill, rounded up, at least 1. Stores that keep a
// bucket's TAT elsewhere (a script) and readers of its state use it.
func Emission(l *ratelimit.Limit) int64 {
	// The window in microseconds over Count, rounded up; both are
	// positive in a valid limit.
	w := int64(l.Window / time.Microsecond)
	t := w / l.Count
	if w%l.Count != 0 {
		t++
	}
	return max(t, 1)
}

// maxDepth bounds a bucket's depth (about 73,000 years in microseconds) so
// that TAT arithmetic never overflows; a deeper bucket is indistinguishable
// from an endless one.
const maxDepth = 1 << 61

// satMul returns a*b for non-negative a and b, saturating at maxDepth.
func satMul(a, b int64) int64 {
	p := mul(uint64(a), uint64(b))
	if p.hi != 0 || p.lo > maxDepth {
		return maxDepth
	}
	return int64(p.lo)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// u128 is an unsigned 128-bit integer, enough for count × milliseconds of
// any window this package accepts.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (a u128) add(b u128) u128 {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, carry)
	return u128{hi, lo}
}

func (a u128) sub(b u128) u128 {
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, borrow)
	return u128{hi, lo}
}

func (a u128) cmp(b u128) int {
	switch {
	case a.hi != b.hi:
		if a.hi < b.hi {
			return -1
		}
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// div returns a/d, saturating at MaxUint64 when the quotient does not fit.
func (a u128) div(d uint64) uint64 {
	if a.hi >= d {
		return math.MaxUint64
	}
	q, _ := bits.Div64(a.hi, a.lo, d)
	return q
}

func (a u128) float() float64 { return float64(a.hi)*(1<<64) + float64(a.lo) }

// TryAllow is the allow-only path of Apply (ratelimit.Request.AllowOnly):
// when Apply would allow r, TryAllow updates cs exactly as Apply would and
// returns true, without computing any limit's state. Otherwise it returns
// false, with cs as they were but rolled to r.Now: the caller then calls
// Apply for the decision, which is what Apply would have given on the
// original counters. r.Now must be set and r.Limits valid.
func TryAllow(r *ratelimit.Request, cs []Counter) bool {
	if len(r.Limits) > inlineStates {
		return false
	}
	cost := r.Cost
	if cost <= 0 {
		cost = 1
	}
	nowNs := r.Now.UnixNano()
	var (
		dst  [inlineStates]*int64 // each limit's Cur, or a bucket's TAT
		next [inlineStates]int64  // and its new value
	)
	for i := range r.Limits {
		d, n := tryLimit(&r.Limits[i], &cs[i], cost, nowNs)
		if d == nil {
			return false
		}
		dst[i], next[i] = d, n
	}
	for i := range r.Limits {
		*dst[i] = next[i]
	}
	return true
}

// TryAllowOne is TryAllow for a request of one limit l, with counter c,
// cost (zero means 1) and Now nowNs (Unix ns): when Apply would allow the
// call it updates c as Apply would and returns true; otherwise it returns
// false with c rolled to nowNs. l must be valid.
func TryAllowOne(l *ratelimit.Limit, c *Counter, cost, nowNs int64) bool {
	dst, n := tryLimit(l, c, cost, nowNs)
	if dst == nil {
		return false
	}
	*dst = n
	return true
}

// tryLimit reports whether a call of cost (zero means 1) at nowNs fits l:
// if so it returns the place of c that changes, Cur or a bucket's TAT, and
// its new value, and otherwise nil. A window counter is rolled to nowNs
// either way; nothing else of c changes.
func tryLimit(l *ratelimit.Limit, c *Counter, cost, nowNs int64) (dst *int64, next int64) {
	cost = max(cost, 1)
	if l.Algorithm == ratelimit.TokenBucket {
		burst := l.Capacity()
		if cost > burst {
			return nil, 0
		}
		t := Emission(l)
		nowUs := floorDiv(nowNs, int64(time.Microsecond))
		tat := max(c.Start, nowUs)
		inc := satMul(cost, t)
		if tat+inc-nowUs > satMul(burst, t) {
			return nil, 0
		}
		return &c.Start, tat + inc
	}
	nowMs := floorDiv(nowNs, int64(time.Millisecond))
	w := int64(l.Window / time.Millisecond)
	if e := nowMs - c.Start; e < 0 || e >= w { // roll's own first test, kept here so that a call within c's window makes no call
		roll(c, l, nowMs)
	}
	cur := c.Cur
	if cur > math.MaxInt64-cost {
		cur = math.MaxInt64
	} else {
		cur += cost
	}
	if l.Algorithm == ratelimit.FixedWindow {
		if cur > l.Count {
			return nil, 0
		}
		return &c.Cur, cur
	}
	if p := c.Prev; cur >= 0 && p >= 0 && cur <= l.Count && p <= l.Count-cur {
		return &c.Cur, cur // the previous window's weight is at most 1: rate <= cur + p <= Count
	}
	e := max(nowMs-c.Start, 0)
	total := mul(uint64(cur), uint64(w)).add(mul(uint64(c.Prev), uint64(w-e)))
	if total.cmp(mul(uint64(l.Count), uint64(w))) > 0 {
		return nil, 0
	}
	return &c.Cur, cur
}
