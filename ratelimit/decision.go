package ratelimit

import (
	"math"
	"time"

	"github.com/seed-008287da/sluice/ratelimit/internal/access"
)

// InfDuration is the RetryAfter of a call that can never be allowed: its
// cost is larger than some limit's capacity.
const InfDuration = time.Duration(math.MaxInt64)

// LimitState reports one limit of a decision.
type LimitState struct {
	// Limit is the limit as it was passed in.
	Limit Limit
	// Used is the count the decision saw, including this call's cost when
	// the call was counted in this limit: hits in a fixed window, the
	// weighted rate of a sliding window (fractional), tokens taken from a
	// bucket. A window that denied a call (Decision.Denied) reports the
	// count with the call's cost, the count it would have reached; a
	// bucket, the tokens taken without it. The other limits of a denied
	// call may or may not include it.
	Used float64
	// Remaining is how many more units the limit would admit now, floored,
	// never negative.
	Remaining int64
	// Reset is when the limit is clear again: the end of a fixed window; for
	// a sliding window the end of the current window plus the time the excess
	// needs to drain ((Used-Count)/Count windows, Kong's formula); the time
	// until a token bucket is full.
	Reset time.Duration
	// Exceeded reports whether this limit's rate is above its Count.
	Exceeded bool
	// Counted reports whether this call's cost is in the limit's counter
	// after the decision.
	Counted bool
}

// inlineStates is how many limit states a Decision holds without
// allocating. Kong configurations rarely use more than a few windows.
const inlineStates = access.Inline

// A Decision is the answer to a Request.
//
// A Decision is a value; the per-limit states it carries stay valid after
// the store is called again.
type Decision struct {
	// Allowed reports whether the call may proceed. Being denied is not an
	// error.
	Allowed bool
	// Denied is the index of the first limit that denied the call, or -1.
	Denied int
	// RetryAfter is, when denied, how long until the call could be allowed
	// if no other call arrived: the longest wait over all limits. It is
	// InfDuration when the cost is larger than a limit's capacity. Zero when
	// allowed.
	RetryAfter time.Duration

	n      int
	inline [inlineStates]LimitState
	more   []LimitState
}

// Len returns the number of limit states, one per limit of the request.
func (d *Decision) Len() int { return d.n }

// State returns the state of the i-th limit of the request.
func (d *Decision) State(i int) LimitState {
	if i < inlineStates {
		return d.inline[i]
	}
	return d.more[i-inlineStates]
}

// States returns all limit states in request order. Up to 4 states, the
// slice aliases d and States does not allocate; beyond, it is a copy.
func (d *Decision) States() []LimitState {
	if d.n <= inlineStates {
		return d.inline[:d.n]
	}
	all := make([]LimitState, 0, d.n)
	all = append(all, d.inline[:]...)
	return append(all, d.more...)
}

func init() {
	access.NewDecision = func(allowed bool, denied int, retry time.Duration, s access.States[LimitState]) Decision {
		return Decision{Allowed: allowed, Denied: denied, RetryAfter: retry, n: s.N, inline: s.Inline, more: s.More}
	}
}

func (d *Decision) statePtr(i int) *LimitState {
	if i < inlineStates {
		return &d.inline[i]
	}
	return &d.more[i-inlineStates]
}

// Reported returns the index of the limit a single set of headers should
// describe (RateLimit-Limit, -Remaining, -Reset): the one with the smallest
// Remaining, and among those the largest window. It returns -1 for an empty
// decision.
func (d *Decision) Reported() int {
	best := -1
	var bs *LimitState
	for i := 0; i < d.n; i++ {
		s := d.statePtr(i)
		if best < 0 || s.Remaining < bs.Remaining ||
			(s.Remaining == bs.Remaining && s.Limit.Window > bs.Limit.Window) {
			best, bs = i, s
		}
	}
	return best
}

// Impossible reports whether the call was denied because its cost can never
// fit a limit: waiting would not help.
func (d *Decision) Impossible() bool { return !d.Allowed && d.RetryAfter == InfDuration }
