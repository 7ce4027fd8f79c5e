package policy

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// waitingRoomPrefix starts the lease keys of waiting rooms. HTTP header
// values and ids never contain NUL, so these keys cannot meet a counter
// key.
const waitingRoomPrefix = "\x00waiting-room\x00"

// wait runs a denied request through the waiting room. The
// behaviour of Kong 3.12+ is documented but its code is not public; the
// parts marked "inferred" are sluice's design, described in
// docs/kong-compatibility.md (Throttling).
//
// It returns the decision that ends the wait (the first allowing retry, or
// the last denial), the time of that decision and the number of retries.
// When ctx ends it returns at once with the last denial and ctx's error.
func (a *Advanced) wait(ctx context.Context, sr *ratelimit.Request, first ratelimit.Decision, now time.Time) (ratelimit.Decision, time.Time, int, error) {
	t := a.throttling
	interval := time.Duration(math.Round(t.Interval * float64(time.Second)))
	interval = interval.Round(time.Millisecond)
	// Inferred: the waiting count is a counter kept with the configured
	// strategy that frees itself. A concurrency lease per waiting request
	// is exactly that: at most queue_limit live leases per key, each
	// lapsing after interval*(retry_times+1) if its holder vanishes
	// without releasing it (a crashed node), so a slot is never lost.
	// Inferred: the room is per (namespace, key), not per plugin instance.
	lr := ratelimit.LeaseRequest{
		Key: waitingRoomPrefix + sr.Key,
		ID:  ratelimit.NewLeaseID(),
		Max: t.QueueLimit,
		TTL: leaseTTL(interval, t.RetryTimes),
		Now: now,
	}
	lease, err := a.store.Acquire(ctx, lr)
	if err != nil {
		return first, now, 0, fmt.Errorf("policy: entering waiting room of namespace %q: %w", a.namespace, err)
	}
	if !lease.Allowed {
		// The room is full: the normal rejection.
		return first, now, 0, nil
	}
	defer func() {
		// Release even when the client is gone; the lease would otherwise
		// hold its slot until its TTL.
		_ = a.store.Release(context.WithoutCancel(ctx), lr.Key, lr.ID)
	}()

	// Retries happen interval after interval on the request's own clock:
	// the first decision was taken at now, retry i at now + i*interval of
	// elapsed time.
	entered := time.Now()
	timer := time.NewTimer(interval)
	defer timer.Stop()
	d := first
	for i := 1; i <= int(t.RetryTimes); i++ {
		select {
		case <-ctx.Done():
			return d, now, i - 1, fmt.Errorf("policy: waiting room abandoned: %w", ctx.Err())
		case <-timer.C:
		}
		now = sr.Now.Add(time.Since(entered))
		r := *sr
		r.Now = now
		// Inferred: a retry is a full evaluation with the plugin's penalty
		// rule, so with disable_penalty false every retry is counted (the
		// docs' warning).
		next, err := a.store.Take(ctx, r)
		if err != nil {
			// Kong never fails a request because of its store: admit it.
			return ratelimit.Decision{Allowed: true, Denied: -1}, now, i, fmt.Errorf("policy: retrying in waiting room of namespace %q: %w", a.namespace, err)
		}
		d = next
		if d.Allowed {
			return d, now, i, nil
		}
		timer.Reset(interval)
	}
	return d, now, int(t.RetryTimes), nil
}

// maxLeaseTTL caps a waiting-room lease's life (Kong allows interval and
// retry_times up to a million each, more than a time.Duration holds).
const maxLeaseTTL = 100 * 365 * 24 * time.Hour

// leaseTTL is interval*(retries+1), capped at maxLeaseTTL.
func leaseTTL(interval time.Duration, retries int64) time.Duration {
	if float64(interval)*float64(retries+1) >= float64(maxLeaseTTL) {
		return maxLeaseTTL
	}
	return interval * time.Duration(retries+1)
}
