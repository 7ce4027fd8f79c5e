package ratelimit

import (
	"sync/atomic"
	"time"
)

// clockResync is how long a clock advances its wall time by the monotonic
// clock alone before it reads the wall clock again.
const clockResync = time.Second

// A clock reads the time for a Limiter's shorthand calls. time.Now reads
// two clocks, the wall and the monotonic one; a clock reads the monotonic
// one and adds what it has run since a wall-clock reading at most
// clockResync old, which takes half the time. Its times are time.Now's but
// for the slewing or stepping of the wall clock within the last
// clockResync, and carry no monotonic reading. The zero clock is ready to
// use and safe for concurrent use.
type clock struct {
	base atomic.Pointer[clockBase] // nil until first used
}

type clockBase struct {
	at   time.Time // a time.Now reading
	wall int64     // at.UnixNano()
}

// unixNano returns the time in nanoseconds since the Unix epoch.
func (c *clock) unixNano() int64 {
	if b := c.base.Load(); b != nil {
		// Inside a testing/synctest bubble Since reads the bubble's clock,
		// so the sum is exactly the bubble's time.
		if d := time.Since(b.at); uint64(d) < uint64(clockResync) { // 0 <= d < clockResync
			return b.wall + int64(d)
		}
	}
	return c.resync()
}

// resync reads the wall clock, makes it c's base and returns it in Unix
// nanoseconds.
func (c *clock) resync() int64 {
	t := time.Now()
	c.base.Store(&clockBase{at: t, wall: t.UnixNano()})
	return t.UnixNano()
}

// now is unixNano as a time.Time.
func (c *clock) now() time.Time { return time.Unix(0, c.unixNano()) }
