package ratelimit

import (
	"context"
	"time"
)

// A CounterState is what a store holds for one limit of one key, read
// without deciding anything.
type CounterState struct {
	// Limit is the limit as it was passed in.
	Limit Limit
	// Start is the start of the current window (the one holding the time
	// asked about). For a TokenBucket it is the theoretical arrival time:
	// the bucket is full again at Start, and it is zero for a full bucket.
	Start time.Time
	// Current is the count of the window starting at Start, Previous the
	// count of the window before it. Both are zero for a TokenBucket.
	Current, Previous int64
}

// Empty reports whether the counter holds nothing that could affect a
// decision at now.
func (c *CounterState) Empty(now time.Time) bool {
	if c.Limit.Algorithm == TokenBucket {
		return !c.Start.After(now)
	}
	return c.Current == 0 && c.Previous == 0
}

// An Inspector is a Store whose counters can be read and reset one key at
// a time, for operators: an admin API showing a client's counts, or
// clearing them after a false alarm. Inspect and Reset never count.
type Inspector interface {
	Store
	// Inspect returns the counters of r.Key for every limit of r.Limits,
	// in order, as of r.Now (zero means time.Now()). It changes nothing;
	// r.Cost, r.Penalty and r.Peek are ignored.
	Inspect(ctx context.Context, r Request) ([]CounterState, error)
	// Reset deletes the counters of r.Key for every limit of r.Limits, the
	// window holding r.Now (zero means time.Now()) and the one before it:
	// the next call starts from zero. Resetting a key that holds nothing is
	// not an error. A store shared between nodes resets the shared
	// counters, so that every node sees it.
	Reset(ctx context.Context, r Request) error
}

// A LeaseState is one live concurrency lease.
type LeaseState struct {
	// ID is the lease's id, as acquired.
	ID string
	// Expires is when the lease lapses unless released or renewed.
	Expires time.Time
}

// A LeaseInspector is a LeaseStore whose leases can be listed and dropped
// one key at a time.
type LeaseInspector interface {
	LeaseStore
	// Leases returns the leases of key alive at now (zero means
	// time.Now()), in no particular order.
	Leases(ctx context.Context, key string, now time.Time) ([]LeaseState, error)
	// ResetLeases drops every lease of key; their holders' later Release
	// calls are no-ops.
	ResetLeases(ctx context.Context, key string) error
}
