package redisstore

import (
	"context"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// localMode is the mode of SyncRate LocalOnly (Kong's sync_rate -1):
// counters in this process only, whatever the layout, and a goroutine that
// drops the expired ones.
type localMode struct {
	*Store
	loop *loop
}

func newLocalMode(st *Store) *localMode {
	return &localMode{Store: st, loop: st.every(sweepInterval, st.sweep)}
}

func (s *localMode) take(_ context.Context, r ratelimit.Request, _ bool) (ratelimit.Decision, error) {
	return s.local.take(&r, false), nil
}

func (s *localMode) read(_ context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	return s.local.counters(r), r.Now, nil
}

func (s *localMode) reset(context.Context, *ratelimit.Request) error { return nil }

func (s *localMode) sync(ctx context.Context, now time.Time) error { return s.sweep(ctx, now) }

func (s *localMode) close() { s.loop.close() }
