package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A callCtx is what context.WithTimeout(context.Background(), d) gives,
// for one batch of Redis calls, but reused: once the calls are over, a
// context whose deadline has not passed goes back to a pool with its
// timer and channel, so that a decision does not allocate a context and a
// timer of its own. No context is derived from it past its calls (rueidis
// and the dialer cancel what they derive before they return), and a
// context that expired is never reused.
type callCtx struct {
	deadline time.Time
	done     chan struct{}
	timer    *time.Timer
	expired  atomic.Bool
}

var callCtxs sync.Pool

// newCallCtx returns a context that expires after d.
func newCallCtx(d time.Duration) *callCtx {
	c, _ := callCtxs.Get().(*callCtx)
	if c == nil {
		c = &callCtx{done: make(chan struct{})}
		c.deadline = time.Now().Add(d)
		c.timer = time.AfterFunc(d, c.expire)
		return c
	}
	c.deadline = time.Now().Add(d)
	c.timer.Reset(d)
	return c
}

func (c *callCtx) expire() {
	c.expired.Store(true)
	close(c.done)
}

// release ends c's use; c must not be used after.
func (c *callCtx) release() {
	if c.timer.Stop() {
		callCtxs.Put(c)
	}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *callCtx) Done() <-chan struct{} { return c.done }

func (c *callCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) Value(any) any { return nil }
