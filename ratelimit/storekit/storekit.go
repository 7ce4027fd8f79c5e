// Package storekit is for writers of a ratelimit.Store: the algorithms'
// math as a pure function of a request and its counters (Apply), the
// counter a store keeps per key and limit, and the checks every store
// makes on its input. Users of the SDK do not need it.
//
// A store keeps one Counter per key and CounterID, hands a request's
// counters to Apply under whatever lock or script makes the call atomic,
// and writes them back; Counter.Expiry says when one may be dropped. The
// conformance suite in package ratelimittest checks the result.
package storekit

import (
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/internal/access"
)

// inlineStates is how many limits Apply decides without allocating.
const inlineStates = access.Inline

type states = access.States[ratelimit.LimitState]

// newDecision builds a ratelimit.Decision; see package access.
var newDecision = access.NewDecision.(func(allowed bool, denied int, retry time.Duration, s states) ratelimit.Decision)

// SetState sets the state of d's i-th limit, growing d to i+1 states when
// needed. A store that decides elsewhere (a server-side script) can build
// its decisions with it; Apply's decisions come complete.
func SetState(d *ratelimit.Decision, i int, s ratelimit.LimitState) {
	var st states
	for j := range d.Len() {
		st.Grow(j + 1)
		*st.At(j) = d.State(j)
	}
	st.Grow(i + 1)
	*st.At(i) = s
	*d = newDecision(d.Allowed, d.Denied, d.RetryAfter, st)
}

// ValidateLease reports why r cannot be decided, or nil. The error wraps
// ratelimit.ErrInvalidLimit.
func ValidateLease(r *ratelimit.LeaseRequest) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: lease id must not be empty", ratelimit.ErrInvalidLimit)
	case r.Max <= 0:
		return fmt.Errorf("%w: lease max must be greater than 0, got %d", ratelimit.ErrInvalidLimit, r.Max)
	case r.TTL <= 0 || r.TTL%time.Millisecond != 0:
		return fmt.Errorf("%w: lease ttl must be a positive whole number of milliseconds, got %s", ratelimit.ErrInvalidLimit, r.TTL)
	}
	return nil
}
