package ratelimit

import (
	"fmt"
	"strconv"
	"time"
)

// Algorithm selects how a Limit counts.
//
// The zero value is SlidingWindow, the default of Kong's
// rate-limiting-advanced plugin.
type Algorithm uint8

const (
	// SlidingWindow counts hits in epoch-aligned windows and weighs the
	// previous window by the share of it that still overlaps the sliding
	// interval ending now (Kong's formula). Unlike a fixed window it does
	// not admit a full Count on each side of a window edge; it is an
	// estimate, not an exact count: after hits late in the previous window,
	// one interval of length Window may still see up to 2*Count-1 (199
	// with PerSecond(100)).
	SlidingWindow Algorithm = iota
	// FixedWindow counts hits in epoch-aligned windows: a 60 s window always
	// starts at second :00. Requests 1..Count pass, request Count+1 is denied.
	FixedWindow
	// TokenBucket is the generic cell rate algorithm (GCRA): Count tokens are
	// refilled evenly over Window, up to Burst tokens may be taken at once.
	// It keeps one timestamp per key.
	TokenBucket
)

// String returns the name used in configuration: "sliding", "fixed" or
// "token_bucket".
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding"
	case FixedWindow:
		return "fixed"
	case TokenBucket:
		return "token_bucket"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "sliding":
		return SlidingWindow, nil
	case "fixed":
		return FixedWindow, nil
	case "token_bucket":
		return TokenBucket, nil
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want sliding, fixed or token_bucket)", ErrInvalidLimit, s)
}

// A Limit allows Count units per Window for one key.
//
// Limits are plain values: a store receives them with every call, so a new
// configuration changes the numbers a key is checked against without
// rebuilding anything and without resetting its counters. Counters are
// identified by key and Window (and Algorithm for TokenBucket), so two limits
// with the same Window share their count, as Kong's windows do.
//
// The zero value is not a valid limit; see Validate.
type Limit struct {
	// Algorithm is how hits are counted; the zero value is SlidingWindow.
	Algorithm Algorithm
	// Count is the number of units allowed per Window. It must be > 0.
	Count int64
	// Window is the length of a window, or for TokenBucket the time in which
	// Count tokens are refilled. It must be a positive whole number of
	// milliseconds: Kong measures time in milliseconds and the Redis scripts
	// share that resolution.
	Window time.Duration
	// Burst is the bucket size of a TokenBucket limit: the number of units
	// that may be taken at once after an idle period. Zero means Count.
	// Burst is ignored by the window algorithms.
	Burst int64
}

// PerSecond returns a sliding-window limit of n units per second.
func PerSecond(n int64) Limit { return Limit{Count: n, Window: time.Second} }

// PerMinute returns a sliding-window limit of n units per minute.
func PerMinute(n int64) Limit { return Limit{Count: n, Window: time.Minute} }

// PerHour returns a sliding-window limit of n units per hour.
func PerHour(n int64) Limit { return Limit{Count: n, Window: time.Hour} }

// PerDay returns a sliding-window limit of n units per day (86400 s, UTC
// aligned).
func PerDay(n int64) Limit { return Limit{Count: n, Window: 24 * time.Hour} }

// Every returns a sliding-window limit of n units per window w.
func Every(n int64, w time.Duration) Limit { return Limit{Count: n, Window: w} }

// Fixed returns l counted in fixed windows.
func (l Limit) Fixed() Limit { l.Algorithm = FixedWindow; return l }

// Sliding returns l counted in sliding windows.
func (l Limit) Sliding() Limit { l.Algorithm = SlidingWindow; return l }

// TokenBucket returns l as a token bucket refilled at Count per Window that
// holds at most burst tokens (zero means Count).
func (l Limit) TokenBucket(burst int64) Limit {
	l.Algorithm = TokenBucket
	l.Burst = burst
	return l
}

// Capacity is the largest cost a single call can ever be granted: Burst for
// a token bucket (Count when Burst is zero), Count otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}

// String formats l as "10/1m0s sliding".
func (l Limit) String() string {
	s := strconv.FormatInt(l.Count, 10) + "/" + l.Window.String() + " " + l.Algorithm.String()
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		s += " burst " + strconv.FormatInt(l.Burst, 10)
	}
	return s
}

// maxWindow keeps window arithmetic in milliseconds far from overflow: a
// hundred years.
const maxWindow = 100 * 365 * 24 * time.Hour

// Validate reports why l cannot be used, or nil. The error wraps
// ErrInvalidLimit and names the offending field. A token bucket refills in
// whole microseconds, so its Count may be at most one per microsecond of
// Window (10^6 per second).
func (l Limit) Validate() error {
	if l.valid() {
		return nil
	}
	return l.invalid()
}

// valid is Validate's verdict without the error, cheap enough for a store to
// check a call's limits every time.
func (l *Limit) valid() bool {
	return l.Algorithm <= TokenBucket && l.Count > 0 && l.Window > 0 &&
		l.Window%time.Millisecond == 0 && l.Window <= maxWindow && l.Burst >= 0 &&
		(l.Algorithm != TokenBucket || l.Count <= int64(l.Window/time.Microsecond))
}

// invalid returns the error for a limit that is not valid.
func (l Limit) invalid() error {
	switch {
	case l.Algorithm > TokenBucket:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	case l.Count <= 0:
		return fmt.Errorf("%w: count must be greater than 0, got %d", ErrInvalidLimit, l.Count)
	case l.Window <= 0:
		return fmt.Errorf("%w: window must be greater than 0, got %s", ErrInvalidLimit, l.Window)
	case l.Window%time.Millisecond != 0:
		return fmt.Errorf("%w: window must be a whole number of milliseconds, got %s", ErrInvalidLimit, l.Window)
	case l.Window > maxWindow:
		return fmt.Errorf("%w: window must be at most %s, got %s", ErrInvalidLimit, maxWindow, l.Window)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	case l.Algorithm == TokenBucket && l.Count > int64(l.Window/time.Microsecond):
		return fmt.Errorf("%w: count of a token bucket must be at most %d per %s (one per microsecond), got %d",
			ErrInvalidLimit, int64(l.Window/time.Microsecond), l.Window, l.Count)
	}
	return nil
}

// ValidateLimits checks every limit of one call and returns the first
// error, naming its index. An empty list is an error: a call must be checked
// against something.
func ValidateLimits(ls []Limit) error {
	if len(ls) == 0 {
		return fmt.Errorf("%w: no limits given", ErrInvalidLimit)
	}
	for i := range ls {
		if !ls[i].valid() {
			return fmt.Errorf("limit %d: %w", i, ls[i].invalid())
		}
	}
	return nil
}
