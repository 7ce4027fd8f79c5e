package redisstore

import (
	"context"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Reading and resetting counters (Request.Peek, ratelimit.Inspector,
// ratelimit.LeaseInspector). A store reads where it decides: Redis in
// synchronous mode (sluice's layout through inspect.lua, Kong's with
// HGET), this node's counters with LocalOnly, in periodic mode (the
// totals of the last sync plus this node's hits since) and while Redis
// is unavailable. Reset deletes the counters in Redis whatever the sync
// rate, so that every node sharing the namespace sees it, and on this
// node; see Reset for how soon other nodes see it.

var inspectScript = mustScript("lua/inspect.lua")

var (
	_ ratelimit.Inspector      = (*Store)(nil)
	_ ratelimit.LeaseInspector = (*Store)(nil)
)

// peek decides r, validated with Cost and Now set, on the counters Take
// would use, changing none of them.
func (s *Store) peek(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	cs, now, err := s.read(ctx, r)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	r.Now = now
	return storekit.Apply(r, cs), nil
}

// Inspect returns the counters of r.Key; see ratelimit.Inspector.
func (s *Store) Inspect(ctx context.Context, r ratelimit.Request) ([]ratelimit.CounterState, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return nil, err
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	cs, now, err := s.read(ctx, &r)
	if err != nil {
		return nil, err
	}
	return storekit.States(r.Limits, cs, now), nil
}

// read returns the counters of r as a decision now would see them, and
// the time it would be decided at (Redis' clock for a request holding a
// token bucket, unless CallerClock).
func (s *Store) read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	if s.opts.KongLayout {
		if err := checkKong(r.Limits); err != nil {
			return nil, time.Time{}, err
		}
	}
	if s.opts.EnvoyLayout {
		if err := checkEnvoy(r.Limits); err != nil {
			return nil, time.Time{}, err
		}
	}
	return s.mode.read(ctx, r)
}

// Reset deletes the counters of r.Key in Redis and on this node; see
// ratelimit.Inspector. Every node reads the reset counters at its next
// decision in synchronous mode, except a sliding window's previous count
// a node already holds final (it keeps it until the window ends); in
// periodic mode at the first sync cycle after this node's next one. With
// LocalOnly only this node's counters exist. When Redis does not answer
// the local counters are still reset and the error is returned.
func (s *Store) Reset(ctx context.Context, r ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return err
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	s.local.reset(r.Key, r.Limits)
	return s.mode.reset(ctx, &r)
}
