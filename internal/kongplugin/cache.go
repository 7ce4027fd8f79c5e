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
// matters when configs churn: the least recently used entry goes first and
// is closed once no request holds it, after a linger (see compiledCache).
// Counters live in the Registry, shared by every config of a namespace: an
// evicted config recompiled within its linger finds them again.
const maxCompiled = 512

// compiledCache maps a config hash to its compiled value. Errors are not
// cached: a config that failed (an unreachable overrides source, a Redis
// that refused the first connection) is compiled again by the next
// attempt. It is safe for concurrent use.
//
// A value is closed (close) once it is evicted and no request holds it:
// every user takes a reference (get, lazy.get, each) and gives it back
// when done, so a request that holds a value while it is evicted finishes
// on it. linger, when set, delays the close after the last reference:
// sluice-concurrency keeps an evicted store for the lease TTL, so a lease
// taken in the access phase is still there to be released in the log
// phase, which holds no reference in between.
type compiledCache[T any] struct {
	mu    sync.Mutex
	m     map[[32]byte]*cacheEntry[T]
	clock atomic.Int64
	// max bounds the entries; 0 means maxCompiled.
	max int
	// close releases what a value holds; nil means there is nothing to
	// release.
	close func(T)
	// linger is how long an evicted value stays open after its last
	// reference; nil means it closes at once.
	linger func(T) time.Duration
	// lingering are the evicted entries waiting for their close, closed
	// at once by closeAll.
	lingering map[*cacheEntry[T]]struct{}
}

type cacheEntry[T any] struct {
	c    *compiledCache[T]
	val  T
	used atomic.Int64

	mu      sync.Mutex
	refs    int
	evicted bool
	closed  bool
}

// acquire takes a reference to e; false once e is evicted, when the caller
// looks the config up again.
func (e *cacheEntry[T]) acquire() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.evicted {
		return false
	}
	e.refs++
	return true
}

// release gives a reference back, closing e when it is evicted and was the
// last.
func (e *cacheEntry[T]) release() {
	e.mu.Lock()
	e.refs--
	last := e.evicted && e.refs == 0
	e.mu.Unlock()
	if last {
		e.retire()
	}
}

// evict takes e out of service: no new reference, closed after the last.
func (e *cacheEntry[T]) evict() {
	e.mu.Lock()
	e.evicted = true
	idle := e.refs == 0
	e.mu.Unlock()
	if idle {
		e.retire()
	}
}

// retire closes e, after the cache's linger.
func (e *cacheEntry[T]) retire() {
	c := e.c
	var d time.Duration
	if c.linger != nil {
		d = c.linger(e.val)
	}
	if d <= 0 {
		e.shut()
		return
	}
	c.mu.Lock()
	if c.lingering == nil {
		c.lingering = map[*cacheEntry[T]]struct{}{}
	}
	c.lingering[e] = struct{}{}
	c.mu.Unlock()
	time.AfterFunc(d, e.shut)
}

// shut closes e once.
func (e *cacheEntry[T]) shut() {
	e.mu.Lock()
	done := e.closed
	e.closed = true
	e.mu.Unlock()
	if done {
		return
	}
	c := e.c
	c.mu.Lock()
	delete(c.lingering, e)
	c.mu.Unlock()
	if c.close != nil {
		c.close(e.val)
	}
}

// get returns the entry for key with a reference taken, building it with
// build on a miss. build runs under the cache lock, so two instances of
// one config never compile it twice.
func (c *compiledCache[T]) get(key [32]byte, build func() (T, error)) (*cacheEntry[T], error) {
	tick := c.clock.Add(1)
	c.mu.Lock()
	if e, ok := c.m[key]; ok && e.acquire() {
		c.mu.Unlock()
		e.used.Store(tick)
		return e, nil
	}
	if c.m == nil {
		c.m = make(map[[32]byte]*cacheEntry[T])
	}
	var out *cacheEntry[T]
	limit := c.max
	if limit <= 0 {
		limit = maxCompiled
	}
	if len(c.m) >= limit {
		var oldest [32]byte
		best := int64(-1)
		for k, e := range c.m {
			if u := e.used.Load(); best < 0 || u < best {
				oldest, best = k, u
			}
		}
		out = c.m[oldest]
		delete(c.m, oldest)
	}
	val, err := build()
	var e *cacheEntry[T]
	if err == nil {
		e = &cacheEntry[T]{c: c, val: val, refs: 1}
		e.used.Store(tick)
		c.m[key] = e
	}
	c.mu.Unlock()
	if out != nil {
		out.evict() // outside the lock: a close may take the cache lock
	}
	return e, err
}

// closeAll closes every value at once, held or not: the Process is
// closing.
func (c *compiledCache[T]) closeAll() {
	c.mu.Lock()
	es := make([]*cacheEntry[T], 0, len(c.m)+len(c.lingering))
	for _, e := range c.m {
		es = append(es, e)
	}
	for e := range c.lingering {
		es = append(es, e)
	}
	c.m = nil
	c.mu.Unlock()
	for _, e := range es {
		e.mu.Lock()
		e.evicted = true
		e.mu.Unlock()
		e.shut()
	}
}

// retryCompile is how long an instance whose config failed to compile
// answers with that error before compiling again.
const retryCompile = 5 * time.Second

// lazy holds an instance's compiled config: built on the first request,
// kept while its cache entry lives, looked up again once it is evicted, and
// retried at most every retryCompile after a failure. The zero value is
// ready; it is safe for concurrent use.
type lazy[T any] struct {
	done atomic.Pointer[cacheEntry[T]]
	mu   sync.Mutex
	err  error
	at   time.Time
}

// get returns the compiled value and the func that gives its reference
// back, to call when the request is done with it.
func (l *lazy[T]) get(now func() time.Time, build func() (*cacheEntry[T], error)) (T, func(), error) {
	if e := l.done.Load(); e != nil && e.acquire() {
		return e.val, e.release, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.done.Load(); e != nil && e.acquire() {
		return e.val, e.release, nil
	}
	var zero T
	t := now()
	if l.err != nil && t.Sub(l.at) < retryCompile && !t.Before(l.at) {
		return zero, nil, l.err
	}
	e, err := build()
	if err != nil {
		l.err, l.at = err, t
		return zero, nil, err
	}
	l.done.Store(e)
	l.err = nil
	return e.val, e.release, nil
}

// each calls f with every cached value, holding a reference to each.
func (c *compiledCache[T]) each(f func(T)) {
	c.mu.Lock()
	es := make([]*cacheEntry[T], 0, len(c.m))
	for _, e := range c.m {
		if e.acquire() {
			es = append(es, e)
		}
	}
	c.mu.Unlock()
	for _, e := range es {
		f(e.val)
		e.release()
	}
}
