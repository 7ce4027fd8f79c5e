package kongplugin

import (
	"sync"
	"sync/atomic"
)

// maxCompiled bounds each plugin's cache of compiled configs. Kong starts a
// new instance, with a new config struct, on every config change and every
// minute; compiled configs are looked up by the hash of their canonical
// JSON so a restarted instance finds its compiled form again. The bound only
// matters when configs churn: the least recently used entry goes first, and
// dropping one loses no counter (counters live in the Registry).
const maxCompiled = 512

// compiledCache maps a config hash to its compiled value or its error. It
// is safe for concurrent use.
type compiledCache[T any] struct {
	mu    sync.Mutex
	m     map[[32]byte]*cacheEntry[T]
	clock atomic.Int64
}

type cacheEntry[T any] struct {
	val  T
	err  error
	used atomic.Int64
}

// get returns the entry for key, building it with build on a miss. build
// runs under the cache lock, so two instances of one config never compile
// it twice.
func (c *compiledCache[T]) get(key [32]byte, build func() (T, error)) (T, error) {
	tick := c.clock.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		e.used.Store(tick)
		return e.val, e.err
	}
	if c.m == nil {
		c.m = make(map[[32]byte]*cacheEntry[T])
	}
	if len(c.m) >= maxCompiled {
		var oldest [32]byte
		best := int64(-1)
		for k, e := range c.m {
			if u := e.used.Load(); best < 0 || u < best {
				oldest, best = k, u
			}
		}
		delete(c.m, oldest)
	}
	e := &cacheEntry[T]{}
	e.val, e.err = build()
	e.used.Store(tick)
	c.m[key] = e
	return e.val, e.err
}

// len returns the number of cached entries.
func (c *compiledCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
