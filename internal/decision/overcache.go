package decision

import (
	"sync"
	"time"
)

// overCache remembers counter keys found over their limit until their
// window ends, so they are answered without a store call: the local cache
// of envoyproxy/ratelimit (LOCAL_CACHE_SIZE_IN_BYTES). It holds about max
// bytes at most; when full, arbitrary entries make room. A reload empties
// it.
type overCache struct {
	mu    sync.Mutex
	until map[string]time.Time
	size  int
	max   int
}

// entryOverhead approximates the bytes of a map entry besides its key.
const entryOverhead = 48

func newOverCache(maxBytes int) *overCache {
	return &overCache{until: map[string]time.Time{}, max: maxBytes}
}

// over reports whether key is remembered over its limit at now, and the
// time left until its window ends.
func (c *overCache) over(key string, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.until[key]
	if !ok {
		return 0, false
	}
	if !now.Before(u) {
		delete(c.until, key)
		c.size -= len(key) + entryOverhead
		return 0, false
	}
	return u.Sub(now), true
}

func (c *overCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.until)
	c.size = 0
}

// add remembers key as over its limit until until.
func (c *overCache) add(key string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.until[key]; ok {
		c.until[key] = until
		return
	}
	need := len(key) + entryOverhead
	if need > c.max {
		return
	}
	for k := range c.until { // map order: an arbitrary entry goes
		if c.size+need <= c.max {
			break
		}
		delete(c.until, k)
		c.size -= len(k) + entryOverhead
	}
	c.until[key] = until
	c.size += need
}
