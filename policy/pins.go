package policy

import (
	"sync"
	"sync/atomic"
)

// pinTable holds the window starts pinned by the reset rule of sliding
// windows. Kong keeps one pin per window size for the whole
// node; sluice keeps one per (namespace, key, window size), as
// docs/kong-compatibility.md lists: the same result for one client, and one client's
// overload does not move another's reset.
//
// A pin idle for two windows can never be read again (the next request for
// it sees an empty previous window and a rate of at most its cost, so it
// deletes the pin), which bounds the table: such pins are swept.
type pinTable struct {
	n         atomic.Int64 // number of pins, read without the lock
	mu        sync.Mutex
	m         map[pinKey]pinVal
	nextSweep int
}

type pinKey struct {
	namespace string
	key       string
	window    int64 // seconds
}

type pinVal struct {
	start   int64 // pinned window start, Unix seconds
	touched int64 // last use, Unix seconds
}

const minSweep = 1024

func (p *pinTable) init() {
	p.m = make(map[pinKey]pinVal)
	p.nextSweep = minSweep
}

// pin returns the pinned start for k, pinning start when there is none.
func (p *pinTable) pin(k pinKey, start, now int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[k]
	if !ok {
		v.start = start
		if len(p.m) >= p.nextSweep {
			p.sweep(now)
		}
	}
	v.touched = now
	p.m[k] = v
	p.n.Store(int64(len(p.m)))
	return v.start
}

// unpin deletes the pin of k, if any.
func (p *pinTable) unpin(k pinKey) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	delete(p.m, k)
	p.n.Store(int64(len(p.m)))
	p.mu.Unlock()
}

// sweep drops pins idle for more than two windows. Called with mu held.
func (p *pinTable) sweep(now int64) {
	for k, v := range p.m {
		if v.touched+2*k.window < now {
			delete(p.m, k)
		}
	}
	p.nextSweep = max(minSweep, 2*len(p.m))
}

// dropNamespace deletes every pin of a namespace whose store was closed.
func (p *pinTable) dropNamespace(ns string) {
	p.mu.Lock()
	for k := range p.m {
		if k.namespace == ns {
			delete(p.m, k)
		}
	}
	p.n.Store(int64(len(p.m)))
	p.mu.Unlock()
}

// unpinKey deletes every pin of one key of a namespace (a reset counter).
func (p *pinTable) unpinKey(ns, key string) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	for k := range p.m {
		if k.namespace == ns && k.key == key {
			delete(p.m, k)
		}
	}
	p.n.Store(int64(len(p.m)))
	p.mu.Unlock()
}
