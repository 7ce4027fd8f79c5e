package ratelimittest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// TestSuiteOnReferenceStore holds the suite itself to account: a store that
// is nothing but storekit.Apply behind one mutex must pass it. A failure
// here is a wrong table, not a wrong store.
func TestSuiteOnReferenceStore(t *testing.T) {
	Run(t, func(t *testing.T) ratelimit.Store { return newReference() })
}

// TestSuiteCatchesBrokenStores checks that the suite is not vacuous: a
// store with a classic bug must fail some timeline.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	for _, c := range []struct {
		bug    string
		break_ func(*reference)
	}{
		{"forgets the previous window", func(r *reference) { r.forgetPrev = true }},
		{"keeps the cost of denied calls", func(r *reference) { r.alwaysPenalty = true }},
		{"ignores Now", func(r *reference) { r.wallClock = true }},
		{"never denies a lease", func(r *reference) { r.noLeaseMax = true }},
		{"never expires a lease", func(r *reference) { r.noLeaseTTL = true }},
	} {
		failed := false
		for _, tl := range Timelines() {
			r := newReference()
			c.break_(r)
			failed = failed || play(r, tl) != nil
		}
		for _, tl := range LeaseTimelines() {
			r := newReference()
			c.break_(r)
			failed = failed || playLeases(r, tl) != nil
		}
		if !failed {
			t.Errorf("a store that %s passes every timeline", c.bug)
		}
	}
}

type counterKey struct {
	key string
	id  uint64
}

type lease struct {
	id  string
	exp time.Time
}

// reference is the simplest correct store.
type reference struct {
	mu       sync.Mutex
	counters map[counterKey]storekit.Counter
	leases   map[string][]lease

	// Deliberate bugs for TestSuiteCatchesBrokenStores.
	forgetPrev, alwaysPenalty, wallClock, noLeaseMax, noLeaseTTL bool
}

func newReference() *reference {
	return &reference{counters: map[counterKey]storekit.Counter{}, leases: map[string][]lease{}}
}

func (s *reference) Take(_ context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return ratelimit.Decision{}, err
	}
	if r.Cost < 0 {
		return ratelimit.Decision{}, ratelimit.ErrInvalidLimit
	}
	if s.alwaysPenalty {
		r.Penalty = true
	}
	if s.wallClock {
		r.Now = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]storekit.Counter, len(r.Limits))
	for i, l := range r.Limits {
		cs[i] = s.counters[counterKey{r.Key, storekit.CounterID(l)}]
		if s.forgetPrev {
			cs[i].Prev = 0
		}
	}
	d := storekit.Apply(&r, cs)
	if r.Peek {
		return d, nil
	}
	for i, l := range r.Limits {
		s.counters[counterKey{r.Key, storekit.CounterID(l)}] = cs[i]
	}
	return d, nil
}

func (s *reference) Reserve(_ context.Context, r ratelimit.Request, maxDelay time.Duration) (ratelimit.Booking, error) {
	var b ratelimit.Booking
	err := s.update(&r, func(cs []storekit.Counter) { b = storekit.Reserve(&r, maxDelay, cs) })
	return b, err
}

func (s *reference) Unreserve(_ context.Context, r ratelimit.Request, b ratelimit.Booking) error {
	return s.update(&r, func(cs []storekit.Counter) { storekit.Unreserve(&r, b, cs) })
}

func (s *reference) update(r *ratelimit.Request, f func([]storekit.Counter)) error {
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]storekit.Counter, len(r.Limits))
	for i, l := range r.Limits {
		cs[i] = s.counters[counterKey{r.Key, storekit.CounterID(l)}]
	}
	f(cs)
	for i, l := range r.Limits {
		s.counters[counterKey{r.Key, storekit.CounterID(l)}] = cs[i]
	}
	return nil
}

func (s *reference) Inspect(_ context.Context, r ratelimit.Request) ([]ratelimit.CounterState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]storekit.Counter, len(r.Limits))
	for i, l := range r.Limits {
		cs[i] = s.counters[counterKey{r.Key, storekit.CounterID(l)}]
	}
	return storekit.States(r.Limits, cs, r.Now), nil
}

func (s *reference) Reset(_ context.Context, r ratelimit.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range r.Limits {
		delete(s.counters, counterKey{r.Key, storekit.CounterID(l)})
	}
	return nil
}

func (s *reference) Leases(_ context.Context, key string, now time.Time) ([]ratelimit.LeaseState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ratelimit.LeaseState
	for _, l := range s.leases[key] {
		if now.Before(l.exp) {
			out = append(out, ratelimit.LeaseState{ID: l.id, Expires: l.exp})
		}
	}
	return out, nil
}

func (s *reference) ResetLeases(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, key)
	return nil
}

func (s *reference) Acquire(_ context.Context, r ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	if err := storekit.ValidateLease(&r); err != nil {
		return ratelimit.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := slices.DeleteFunc(s.leases[r.Key], func(l lease) bool { return !s.noLeaseTTL && !r.Now.Before(l.exp) })
	i := slices.IndexFunc(ls, func(l lease) bool { return l.id == r.ID })
	switch {
	case i >= 0:
		ls[i].exp = r.Now.Add(r.TTL)
	case int64(len(ls)) < r.Max || s.noLeaseMax:
		ls = append(ls, lease{r.ID, r.Now.Add(r.TTL)})
	default:
		first := ls[0].exp
		for _, l := range ls {
			if l.exp.Before(first) {
				first = l.exp
			}
		}
		s.leases[r.Key] = ls
		n := int64(len(ls))
		return ratelimit.Lease{Active: n, Remaining: max(r.Max-n, 0), RetryAfter: first.Sub(r.Now)}, nil
	}
	s.leases[r.Key] = ls
	n := int64(len(ls))
	return ratelimit.Lease{Allowed: true, Active: n, Remaining: max(r.Max-n, 0), Expires: r.Now.Add(r.TTL)}, nil
}

func (s *reference) Release(_ context.Context, key, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases[key] = slices.DeleteFunc(s.leases[key], func(l lease) bool { return l.id == id })
	return nil
}

func (s *reference) Close() error { return nil }
