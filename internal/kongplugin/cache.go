package kongplugin

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxCompiled bounds each plugin's cache of compiled configs. Kong starts a
// new instance, with a new config struct, on every config change and every
// minute; compiled configs are looked up by the hash of their canonical
// JSON so a restarted instance finds its compiled form again. The bound only
// matters when configs churn: the least recently used entry goes first, and
// dropping one loses no counter (counters live in the Registry).
const maxCompiled = 512

// compiledCache maps a config hash to its compiled value. Errors are not
// cached: a config that failed (an unreachable overrides source, a Redis
// that refused the first connection) is compiled again by the next
// attempt. It is safe for concurrent use.
type compiledCache[T any] struct {
	mu    sync.Mutex
	m     map[[32]byte]*cacheEntry[T]
	clock atomic.Int64
}

type cacheEntry[T any] struct {
	val  T
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
		return e.val, nil
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
	val, err := build()
	if err != nil {
		return val, err
	}
	e := &cacheEntry[T]{val: val}
	e.used.Store(tick)
	c.m[key] = e
	return val, nil
}

// retryCompile is how long an instance whose config failed to compile
// answers with that error before compiling again.
const retryCompile = 5 * time.Second

// lazy holds an instance's compiled config: built on the first request,
// kept once built, and retried at most every retryCompile after a failure.
// The zero value is ready; it is safe for concurrent use.
type lazy[T any] struct {
	done atomic.Pointer[T]
	mu   sync.Mutex
	err  error
	at   time.Time
}

func (l *lazy[T]) get(now func() time.Time, build func() (T, error)) (T, error) {
	if v := l.done.Load(); v != nil {
		return *v, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if v := l.done.Load(); v != nil {
		return *v, nil
	}
	var zero T
	t := now()
	if l.err != nil && t.Sub(l.at) < retryCompile && !t.Before(l.at) {
		return zero, l.err
	}
	v, err := build()
	if err != nil {
		l.err, l.at = err, t
		return zero, err
	}
	l.done.Store(&v)
	l.err = nil
	return v, nil
}

// each calls f with every cached value.
func (c *compiledCache[T]) each(f func(T)) {
	c.mu.Lock()
	vals := make([]T, 0, len(c.m))
	for _, e := range c.m {
		vals = append(vals, e.val)
	}
	c.mu.Unlock()
	for _, v := range vals {
		f(v)
	}
}
