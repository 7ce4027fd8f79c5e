package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Being over a limit is never an error: it is a Decision
// with Allowed false. Errors mean the input was unusable or the backend
// failed.
var (
	// ErrInvalidLimit wraps every error about a Limit or a Request that can
	// never be decided (count or window <= 0, no limits, negative cost).
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	// ErrCostExceedsLimit is returned by Wait when the cost is larger than a
	// limit's capacity: waiting would never help.
	ErrCostExceedsLimit = errors.New("ratelimit: cost exceeds limit")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("ratelimit: store closed")
	// ErrStoreFull is returned by a store that holds its configured maximum of
	// keys and may not evict any of them (see the store's eviction rule).
	ErrStoreFull = errors.New("ratelimit: store full")
)

// A Request asks a Store to count Cost units for Key against every limit in
// Limits at once.
type Request struct {
	// Key identifies the counted subject (a user, an IP, a composite of
	// request dimensions). Keys are opaque bytes; use Key to build one from
	// several parts without collisions.
	Key string
	// Limits are checked in order. Once one denies, the later ones are only
	// read; Penalty says what a denied call keeps.
	Limits []Limit
	// Cost is the number of units the call takes. Zero means 1.
	Cost int64
	// Now is the decision time. Zero means time.Now(). Stores that read a
	// server clock (Redis) may be configured to ignore it.
	Now time.Time
	// Penalty keeps a denied call counted in the windows it was added to
	// before a limit denied it: Kong's rate-limiting-advanced with
	// disable_penalty false, and any fixed-window limit in Kong. Under
	// sustained overload a sliding window then never drops below its limit
	// and the client stays blocked until it slows down.
	//
	// The zero value is all-or-nothing: a denied call consumes nothing in any
	// limit. Token buckets are never charged for a denied call.
	Penalty bool
	// AllowOnly asks for a decision that only says whether the call is
	// allowed: Allowed, Denied and RetryAfter are as without it, but the
	// per-limit states may be left out (Len 0), which lets a store skip
	// computing them. The call is counted the same either way.
	AllowOnly bool
	// Peek asks for the decision this call would get, counting nothing:
	// the store reads the counters of Key and changes none of them (it
	// creates none either). Every store honours it; an admin "explain" or
	// Envoy's hits_addend 0 use it. A peek's limit states report Counted
	// as the call would have been counted.
	Peek bool
}

// A LeaseRequest asks for one of at most Max concurrent leases on Key.
type LeaseRequest struct {
	// Key identifies the guarded subject.
	Key string
	// ID names the lease (NewLeaseID makes one); the holder passes it to
	// Release. Acquiring an ID that is already held renews its TTL without
	// taking a second slot, so a long-poll client may renew its lease on
	// every poll.
	ID string
	// Max is the number of leases that may be alive at once. It must be > 0.
	Max int64
	// TTL bounds the life of the lease: a holder that never releases (it
	// crashed, its connection vanished) loses the slot TTL after acquiring.
	// It must be a positive whole number of milliseconds.
	TTL time.Duration
	// Now is the decision time. Zero means time.Now().
	Now time.Time
}

// A Lease is the answer to a LeaseRequest.
type Lease struct {
	// Allowed reports whether the lease was granted (or renewed).
	Allowed bool
	// Active is the number of live leases on the key after the call.
	Active int64
	// Remaining is Max - Active, never negative.
	Remaining int64
	// Expires is when the lease lapses if not released or renewed; zero when
	// denied.
	Expires time.Time
	// RetryAfter is, when denied, the time until the oldest live lease
	// expires: the latest a slot can free up. Zero when allowed.
	RetryAfter time.Duration
}

// A Store keeps counters and decides requests atomically. Implementations
// must be safe for concurrent use, and every call on one key must see the
// effect of every earlier call on it (in synchronous mode for distributed
// stores): that is what makes "no key admits more than its limit" hold.
//
// The conformance suite in package ratelimittest holds every store to the
// same timelines; package storekit has what a store writer needs.
type Store interface {
	// Take decides r. It returns an error only when r is invalid (wrapping
	// ErrInvalidLimit), the store failed, or ctx ended before a store that
	// uses it could decide (wrapping ctx.Err()).
	Take(ctx context.Context, r Request) (Decision, error)
	// Close releases the store's resources and stops its goroutines.
	Close() error
}

// An Allower is a Store with an allow-only path that answers a bool, for
// callers that need no more (Limiter.Allow uses it). Allow(ctx, r) must
// count r and answer as Take(ctx, r).Allowed does; the conformance suite
// checks it.
type Allower interface {
	Store
	Allow(ctx context.Context, r Request) (bool, error)
}

// A LeaseStore keeps concurrency leases. Implementations must be safe for
// concurrent use; no key ever has more than Max live leases.
type LeaseStore interface {
	// Acquire takes one concurrency lease. It returns an error only when r
	// is invalid (wrapping ErrInvalidLimit), the store failed, or ctx ended
	// first (wrapping ctx.Err()).
	Acquire(ctx context.Context, r LeaseRequest) (Lease, error)
	// Release ends the lease id on key. Releasing a lease that is unknown,
	// already released or expired is not an error.
	Release(ctx context.Context, key, id string) error
	// Close releases the store's resources and stops its goroutines.
	Close() error
}
