package memorystore

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

var (
	_ ratelimit.Inspector      = (*Store)(nil)
	_ ratelimit.LeaseInspector = (*Store)(nil)
)

// counters copies the counters of key for limits into cs (zero for those
// the store does not hold). sh.mu must be held.
func (sh *shard) counters(h1, h2 uint64, limits []ratelimit.Limit, cs []storekit.Counter) []storekit.Counter {
	for i := range limits {
		var c storekit.Counter
		if p := sh.find(fingerprintOf(h1, h2, storekit.CounterID(limits[i]))); p >= 0 {
			c = sh.counter(p)
		}
		cs = append(cs, c)
	}
	return cs
}

// peek decides r, a validated request with Now set, on copies of its
// counters, and reports whether it would be allowed.
func (s *Store) peek(r *ratelimit.Request, d *ratelimit.Decision) bool {
	var buf [4]storekit.Counter
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	cs := sh.counters(h1, h2, r.Limits, buf[:0])
	sh.mu.Unlock()
	dec := storekit.Apply(r, cs)
	if d != nil {
		*d = dec
	}
	return dec.Allowed
}

// Inspect returns the counters of r.Key; see ratelimit.Inspector.
func (s *Store) Inspect(_ context.Context, r ratelimit.Request) ([]ratelimit.CounterState, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return nil, fmt.Errorf("memorystore: %w", err)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	cs := sh.counters(h1, h2, r.Limits, make([]storekit.Counter, 0, len(r.Limits)))
	sh.mu.Unlock()
	return storekit.States(r.Limits, cs, r.Now), nil
}

// Reset deletes the counters of key for limits; see ratelimit.Inspector.
func (s *Store) Reset(_ context.Context, r ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	limits := r.Limits
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range limits {
		if p := sh.find(fingerprintOf(h1, h2, storekit.CounterID(limits[i]))); p >= 0 {
			sh.drop(p)
		}
	}
	return nil
}

// Leases returns the live leases of key; see ratelimit.LeaseInspector.
func (s *Store) Leases(_ context.Context, key string, now time.Time) ([]ratelimit.LeaseState, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	if now.IsZero() {
		now = time.Now()
	}
	ns := now.UnixNano()
	h1, _ := s.keyHash(key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []ratelimit.LeaseState
	for _, l := range sh.leases[key] {
		if l.exp > ns {
			out = append(out, ratelimit.LeaseState{ID: l.id, Expires: time.Unix(0, l.exp)})
		}
	}
	return out, nil
}

// ResetLeases drops the leases of key; see ratelimit.LeaseInspector.
func (s *Store) ResetLeases(_ context.Context, key string) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	h1, _ := s.keyHash(key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	delete(sh.leases, key)
	sh.mu.Unlock()
	return nil
}
