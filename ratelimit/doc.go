// Package ratelimit is sluice's rate-limiting SDK: limits, a Limiter with
// Allow, Reserve and Wait (and their N forms), and the Decision a store
// returns.
//
// A Limit allows Count units per Window for one key. Four algorithms are
// provided: fixed window and sliding window, both with Kong's epoch-aligned
// windows and weighted formula; token bucket (GCRA); and concurrency leases
// for long-lived and long-poll connections. Several limits of one key are
// decided together in one call.
//
// Counters live in a Store: memorystore (in process) or redisstore (shared
// by many nodes). Time is passed in: AllowN decides at the time it is
// given, so window edges can be tested to the nanosecond; only the
// shorthand forms (Limiter.Allow, Reserve, Wait) read the clock. Being over
// a limit is a Decision, never an error.
//
// Reserve takes units now for the moment they will be admitted and says how
// long to wait, as golang.org/x/time/rate's Reserve does; Wait reserves and
// sleeps. Waiters whose units fit in the current or the next window are
// served in the order they came; a window limit reserves no further ahead,
// so a waiter beyond that retries when told to and may be overtaken by a
// later one. The rules for each algorithm are at the top of reserve.go.
//
// Time. A store counts in the newest window it has seen for a key: if the
// clock steps back by Δ, a key touched after the step stays in its newer
// window, and so is held to its count there, for Δ, whatever the window's
// length.
//
// The package uses the standard library only. Middleware for net/http
// lives in httplimit; what only store writers need lives in storekit.
package ratelimit
