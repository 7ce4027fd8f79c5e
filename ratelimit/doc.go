// Package ratelimit is sluice's rate-limiting SDK: limits, decisions, the
// algorithms' math and the Store contract that every counter store
// implements.
//
// Four algorithms are provided: fixed window and sliding window, both with
// Kong's epoch-aligned windows and weighted formula; token bucket (GCRA);
// and concurrency leases for long-lived and long-poll connections. Several
// limits of one key are decided together in one call.
//
// Time is always passed in. Apply, the core of every store, is a pure
// function of a request, its counters and the request's time, so window
// edges can be tested to the nanosecond; only the shorthand forms
// (Limiter.Allow, Limiter.Wait) read the clock.
//
// The package uses the standard library only. Stores live in subpackages:
// memorystore (in process) and redisstore (shared by many nodes).
// Middleware for net/http lives in httplimit.
package ratelimit
