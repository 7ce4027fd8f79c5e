package kongplugin

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// len returns the number of cached entries.
func (c *compiledCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

type cachedVal struct {
	name   string
	closed atomic.Int32
}

func newValCache(max int) *compiledCache[*cachedVal] {
	return &compiledCache[*cachedVal]{max: max, close: func(v *cachedVal) { v.closed.Add(1) }}
}

func cacheKey(name string) [32]byte { return sha256.Sum256([]byte(name)) }

func buildVal(name string, builds *atomic.Int32) func() (*cachedVal, error) {
	return func() (*cachedVal, error) {
		builds.Add(1)
		return &cachedVal{name: name}, nil
	}
}

// An evicted config is closed once the request holding it is done, not
// before; its instance then compiles it again.
func TestCompiledCacheClosesEvictedAfterLastRequest(t *testing.T) {
	c := newValCache(2)
	var builds atomic.Int32
	var inst lazy[*cachedVal]
	instGet := func() (*cachedVal, func(), error) {
		return inst.get(time.Now, func() (*cacheEntry[*cachedVal], error) { return c.get(cacheKey("a"), buildVal("a", &builds)) })
	}
	a, done, err := instGet() // a request in flight on a
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"b", "c"} {
		e, err := c.get(cacheKey(k), buildVal(k, &builds))
		if err != nil {
			t.Fatal(err)
		}
		e.release()
	}
	if c.len() != 2 || a.closed.Load() != 0 {
		t.Fatalf("after evicting a: %d entries, a closed %d times; want 2 entries, a open while held", c.len(), a.closed.Load())
	}
	done()
	if a.closed.Load() != 1 {
		t.Fatalf("a closed %d times after its last request; want 1", a.closed.Load())
	}
	a2, done2, err := instGet()
	if err != nil {
		t.Fatal(err)
	}
	defer done2()
	if a2 == a || a2.closed.Load() != 0 || builds.Load() != 4 {
		t.Fatalf("instance after eviction got %p (old %p), closed %d, %d builds; want a fresh open value, 4 builds", a2, a, a2.closed.Load(), builds.Load())
	}
	c.closeAll()
	if a.closed.Load() != 1 || a2.closed.Load() != 1 {
		t.Fatalf("closeAll: old a closed %d times, new a %d; want 1 each", a.closed.Load(), a2.closed.Load())
	}
}

// With a linger, an evicted config stays open that long after its last
// reference; closeAll closes it at once.
func TestCompiledCacheLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newValCache(1)
		c.linger = func(*cachedVal) time.Duration { return time.Minute }
		var builds atomic.Int32
		get := func(k string) *cachedVal {
			e, err := c.get(cacheKey(k), buildVal(k, &builds))
			if err != nil {
				t.Fatal(err)
			}
			e.release()
			return e.val
		}
		a := get("a")
		b := get("b") // evicts a
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if a.closed.Load() != 0 {
			t.Fatal("a closed before its linger")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if a.closed.Load() != 1 {
			t.Fatalf("a closed %d times after its linger; want 1", a.closed.Load())
		}
		get("c") // evicts b
		c.closeAll()
		if b.closed.Load() != 1 {
			t.Fatalf("closeAll: lingering b closed %d times; want 1", b.closed.Load())
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if b.closed.Load() != 1 {
			t.Fatalf("b closed %d times after its linger too; want 1", b.closed.Load())
		}
	})
}

// Requests racing with evictions never see a closed value, and every value
// is closed exactly once (run with -race).
func TestCompiledCacheEvictionRace(t *testing.T) {
	c := newValCache(3)
	var builds atomic.Int32
	var mu sync.Mutex
	var all []*cachedVal
	var insts [8]lazy[*cachedVal]
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				k := (g + i) % len(insts)
				name := fmt.Sprint("cfg-", k)
				v, done, err := insts[k].get(time.Now, func() (*cacheEntry[*cachedVal], error) {
					e, err := c.get(cacheKey(name), buildVal(name, &builds))
					if err == nil {
						mu.Lock()
						all = append(all, e.val)
						mu.Unlock()
					}
					return e, err
				})
				if err != nil {
					t.Error(err)
					return
				}
				if v.closed.Load() != 0 || v.name != name {
					bad.Add(1)
				}
				done()
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d requests got a closed or wrong value", bad.Load())
	}
	c.closeAll()
	mu.Lock()
	defer mu.Unlock()
	seen := map[*cachedVal]bool{}
	for _, v := range all {
		seen[v] = true
	}
	if len(seen) < len(insts) {
		t.Fatalf("%d values built; want at least %d", len(seen), len(insts))
	}
	for v := range seen {
		if n := v.closed.Load(); n != 1 {
			t.Fatalf("%s closed %d times; want 1", v.name, n)
		}
	}
}
