package redisstore

import (
	"sync/atomic"
	"time"
)

// SyncTiming is when a periodic store last brought its counters in line
// with Redis, for metrics: the counts other nodes made are seen by this
// node at most Age(now) late.
type SyncTiming struct {
	// Interval is the store's SyncRate; 0 when it does not sync
	// periodically (synchronous or local-only), when the rest is zero too.
	Interval time.Duration
	// Opened is when the store was created.
	Opened time.Time
	// LastSync is the time of the last completed sync cycle (the time it
	// read the totals at); zero before the first.
	LastSync time.Time
	// Decisions is Stats().Decisions: Take calls decided since New.
	Decisions uint64
}

// Age returns how old, at now, the totals of the last completed cycle
// are: now - LastSync, or now - Opened before the first cycle. It is 0
// for a store that does not sync periodically.
func (t SyncTiming) Age(now time.Time) time.Duration {
	if t.Interval <= 0 {
		return 0
	}
	last := t.LastSync
	if last.IsZero() {
		last = t.Opened
	}
	return max(now.Sub(last), 0)
}

// syncClock records the store's sync times (see SyncTiming).
type syncClock struct {
	opened   int64        // Unix nanoseconds
	lastSync atomic.Int64 // Unix nanoseconds, 0 before the first cycle
}

// SyncTiming returns the timing of the store's periodic sync. It is safe
// to call at any time and costs two atomic loads.
func (s *Store) SyncTiming() SyncTiming {
	if s.opts.SyncRate <= 0 {
		return SyncTiming{}
	}
	t := SyncTiming{Interval: s.opts.SyncRate, Opened: time.Unix(0, s.clock.opened), Decisions: s.decisions.Load()}
	if ns := s.clock.lastSync.Load(); ns != 0 {
		t.LastSync = time.Unix(0, ns)
	}
	return t
}
