package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is the store's view of Redis.
type State int32

const (
	// StateConnected: decisions consult Redis as the sync mode says.
	StateConnected State = iota
	// StateFallback: Redis failed; decisions use local counters and Redis
	// is not called until the cool-down has passed.
	StateFallback
	// StateProbing: the cool-down has passed and one call is testing Redis;
	// every other decision still uses local counters.
	StateProbing
)

func (s State) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateFallback:
		return "fallback"
	case StateProbing:
		return "probing"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// A breaker stops calls to a failed Redis for a cool-down, then lets one
// probe through. Closed (connected) is read with one atomic load on the hot
// path.
type breaker struct {
	state     atomic.Int32
	fails     atomic.Int32
	threshold int32
	cooldown  time.Duration

	mu       sync.Mutex
	until    time.Time
	onChange func(from, to State, err error)
}

// allow reports whether a call may go to Redis at now.
func (b *breaker) allow(now time.Time) bool {
	if State(b.state.Load()) == StateConnected {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case StateConnected:
		return true
	case StateFallback:
		if now.Before(b.until) {
			return false
		}
		b.set(StateProbing, nil)
		return true
	}
	return false
}

// success records a call that Redis answered.
func (b *breaker) success() {
	if State(b.state.Load()) == StateConnected && b.fails.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails.Store(0)
	if State(b.state.Load()) != StateConnected {
		b.set(StateConnected, nil)
	}
}

// failure records a call that Redis did not answer in time.
func (b *breaker) failure(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case StateConnected:
		if b.fails.Add(1) < b.threshold {
			return
		}
	case StateFallback:
		return
	}
	b.until = now.Add(b.cooldown)
	b.set(StateFallback, err)
}

// set changes the state and reports the change; b.mu is held, so changes
// are reported in order.
func (b *breaker) set(to State, err error) {
	from := State(b.state.Swap(int32(to)))
	if from != to && b.onChange != nil {
		b.onChange(from, to, err)
	}
}
