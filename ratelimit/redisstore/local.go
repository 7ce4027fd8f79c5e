package redisstore

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// local holds the node's own counters: all of them with sync_rate -1, the
// counters between two sync cycles with sync_rate > 0, and, with sync_rate
// 0, the last totals Redis returned, so that a fallback starts from them.
type local struct {
	seed   maphash.Seed
	shards [localShards]lshard
}

// localShards is the number of independently locked parts of local.
const localShards = 64

type lshard struct {
	mu     sync.Mutex
	m      map[lkey]*entry
	leases map[string]map[string]int64 // key -> lease id -> expiry (Unix ns)
	// dirty lists the counters with hits waiting to be pushed (periodic
	// mode), each once, so that a cycle visits only those.
	dirty []lkey
}

type lkey struct {
	key string
	id  uint64
}

// pend is a batch of local hits not yet pushed to Redis: for a window the
// hits counted in the window starting at start (Unix ms); for a token
// bucket (start 0) the sum of the admitted increments in microseconds.
type pend struct {
	start, d int64
}

type entry struct {
	c   storekit.Counter
	lim ratelimit.Limit
	// two windows can have hits waiting: the current one and the one
	// before, when a window edge passed since the last cycle.
	pend [2]pend
	// dirty is set while the counter is on its shard's dirty list.
	dirty bool
	// expires is the start of the window whose Redis key this node last
	// gave its time to live (synchronous mode, incr.go), or 0.
	expires int64
	// final is the start of the window whose previous window's count c
	// holds as read from Redis once final, or 0: in synchronous mode
	// (incr.go) after prevGrace, in periodic mode (periodic.go) after
	// prevGrace and a sync cycle.
	final int64
}

func newLocal() *local {
	l := &local{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[lkey]*entry)
		l.shards[i].leases = make(map[string]map[string]int64)
	}
	return l
}

func (l *local) shard(key string) *lshard { return &l.shards[l.shardIndex(key)] }

func (l *local) shardIndex(key string) int {
	return int(maphash.String(l.seed, key) % uint64(len(l.shards)))
}

// take decides r on local counters. When track is set, the hits it counts
// are remembered for the next push. Limits of one window share one counter
// (as in every store): it is counted once, as the last of them has it, and
// it is sliding if any of them is (a push then reads its previous window).
func (l *local) take(r *ratelimit.Request, track bool) ratelimit.Decision {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.take(r, track)
}

// takeHeld is take(r, true) when this node holds every counter of r, and
// otherwise returns the counters it lacks, as sync items with no hits,
// deciding nothing.
func (l *local) takeHeld(r *ratelimit.Request) (ratelimit.Decision, []syncItem) {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var missing []syncItem
	for _, lim := range r.Limits {
		id := storekit.CounterID(lim)
		if sh.m[lkey{r.Key, id}] != nil {
			continue
		}
		// Limits of one window share a counter, sliding if one of them is.
		if j := slices.IndexFunc(missing, func(it syncItem) bool { return it.id == id }); j >= 0 {
			if lim.Algorithm == ratelimit.SlidingWindow {
				missing[j].lim = lim
			}
			continue
		}
		missing = append(missing, syncItem{key: r.Key, id: id, lim: lim, absent: true})
	}
	if missing != nil {
		return ratelimit.Decision{}, missing
	}
	return sh.take(r, true), nil
}

// take is local.take with sh, r's shard, locked.
func (sh *lshard) take(r *ratelimit.Request, track bool) ratelimit.Decision {
	var buf [4]storekit.Counter
	var ebuf [4]*entry
	cs, ents := buf[:0], ebuf[:0]
	for _, lim := range r.Limits {
		k := lkey{r.Key, storekit.CounterID(lim)}
		e := sh.m[k]
		if e == nil {
			e = &entry{lim: lim}
			sh.m[k] = e
		}
		if slices.Contains(ents, e) {
			if lim.Algorithm == ratelimit.SlidingWindow {
				e.lim = lim
			}
		} else {
			e.lim = lim
		}
		ents = append(ents, e)
		cs = append(cs, e.c)
	}
	var preBuf [4]storekit.Counter
	pre := preBuf[:0]
	if track {
		pre = append(pre, cs...)
	}
	d := storekit.Apply(r, cs)
	nowUs := r.Now.UnixMicro()
	for i, e := range ents {
		if slices.Contains(ents[i+1:], e) {
			continue // a later limit shares the counter and writes it
		}
		if track && d.State(i).Counted {
			if !e.dirty {
				e.dirty = true
				sh.dirty = append(sh.dirty, lkey{r.Key, storekit.CounterID(r.Limits[i])})
			}
			if e.lim.Algorithm == ratelimit.TokenBucket {
				e.pend[0].d += cs[i].Start - max(pre[i].Start, nowUs)
			} else {
				cost := r.Cost
				if cost <= 0 {
					cost = 1
				}
				e.addPend(cs[i].Start, cost)
			}
		}
		e.c = cs[i]
	}
	return d
}

// addPend records d hits in the window starting at start.
func (e *entry) addPend(start, d int64) {
	for i := range e.pend {
		if e.pend[i].start == start && e.pend[i].d != 0 {
			e.pend[i].d += d
			return
		}
	}
	// Take an empty slot, or drop the oldest batch: it is two or more
	// windows old and can no longer affect a decision.
	j := 0
	if e.pend[0].d != 0 && (e.pend[1].d == 0 || e.pend[1].start < e.pend[0].start) {
		j = 1
	}
	e.pend[j] = pend{start, d}
}

// put stores counters Redis returned for r's limits (synchronous mode).
// ctrs, when not nil, are the plain commands of each counter (of maps
// limits to counters, as in takeCall): those whose window keys were given
// their time to live with this decision (expire), and whose previous
// windows were read once final (see prevGrace).
func (l *local) put(r *ratelimit.Request, cs []storekit.Counter, of []int, ctrs []plainCounter) {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	for i, lim := range r.Limits {
		k := lkey{r.Key, storekit.CounterID(lim)}
		e := sh.m[k]
		if e == nil {
			e = &entry{}
			sh.m[k] = e
		}
		e.lim, e.c = lim, cs[i]
		if ctrs == nil {
			continue
		}
		if ctrs[of[i]].expire {
			e.expires = cs[i].Start
		}
		if ctrs[of[i]].final {
			e.final = cs[i].Start
		}
	}
	sh.mu.Unlock()
}

// unmarkExpired forgets that this node gave counter (key, id) its window's
// time to live, so that its next push or decision sends it again.
func (l *local) unmarkExpired(key string, id uint64) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[lkey{key, id}]; e != nil {
		e.expires = 0
	}
}

// markExpired records that this node gave the Redis key of the window
// starting at start of counter (key, id) its time to live.
func (l *local) markExpired(key string, id uint64, start int64) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[lkey{key, id}]; e != nil && start > e.expires {
		e.expires = start
	}
}

// lookup prepares a synchronous decision of r, whose limit i uses counter
// of[i] in the window starting at cs[i].Start: it sets ctrs[of[i]].expire
// when this node has not yet given that window its time to live, and,
// when it holds the previous window's final count, known[of[i]] and
// ctrs[of[i]].pv.
func (l *local) lookup(r *ratelimit.Request, of []int, cs []storekit.Counter, ctrs []plainCounter, known []bool) {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	for i, lim := range r.Limits {
		e := sh.m[lkey{r.Key, storekit.CounterID(lim)}]
		if e == nil || e.expires != cs[i].Start {
			ctrs[of[i]].expire = true
		}
		if e != nil && e.final == cs[i].Start && e.c.Start == cs[i].Start {
			known[of[i]], ctrs[of[i]].pv = true, e.c.Prev
		}
	}
	sh.mu.Unlock()
}

// addAt adds d hits of the window starting at start to c, rolling c
// forward when start is newer.
func addAt(c *storekit.Counter, w, start, d int64) {
	if start > c.Start {
		if c.Start == start-w {
			c.Prev = c.Cur
		} else {
			c.Prev = 0
		}
		c.Cur, c.Start = 0, start
	}
	switch start {
	case c.Start:
		c.Cur += d
	case c.Start - w:
		c.Prev += d
	}
}

// acquire decides a lease locally.
func (l *local) acquire(r *ratelimit.LeaseRequest) ratelimit.Lease {
	sh := l.shard(r.Key)
	now := r.Now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.leases[r.Key]
	if set == nil {
		set = make(map[string]int64)
		sh.leases[r.Key] = set
	}
	oldest := int64(0)
	for id, exp := range set {
		if exp <= now {
			delete(set, id)
			continue
		}
		if oldest == 0 || exp < oldest {
			oldest = exp
		}
	}
	_, held := set[r.ID]
	n := int64(len(set))
	if held || n < r.Max {
		set[r.ID] = now + int64(r.TTL)
		if !held {
			n++
		}
		return ratelimit.Lease{Allowed: true, Active: n, Remaining: max(r.Max-n, 0), Expires: r.Now.Add(r.TTL)}
	}
	return ratelimit.Lease{Active: n, Remaining: max(r.Max-n, 0), RetryAfter: time.Duration(oldest - now)}
}

func (l *local) release(key, id string) {
	sh := l.shard(key)
	sh.mu.Lock()
	if set := sh.leases[key]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(sh.leases, key)
		}
	}
	sh.mu.Unlock()
}

// sweep drops counters and leases that can no longer affect a decision at
// now and have no hits waiting to be pushed.
func (l *local) sweep(now time.Time) {
	ns := now.UnixNano()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.liveCounters(ns, nil)
		for key, set := range sh.leases {
			for id, exp := range set {
				if exp <= ns {
					delete(set, id)
				}
			}
			if len(set) == 0 {
				delete(sh.leases, key)
			}
		}
		sh.mu.Unlock()
	}
}

// liveCounters drops the counters that can no longer affect a decision at
// ns (Unix nanoseconds) and have no hits waiting to be pushed, and calls f,
// when not nil, with every other one. Called with mu held.
func (sh *lshard) liveCounters(ns int64, f func(lkey, *entry)) {
	for k, e := range sh.m {
		if e.pend[0].d == 0 && e.pend[1].d == 0 && e.c.Expiry(e.lim) < ns {
			delete(sh.m, k)
		} else if f != nil {
			f(k, e)
		}
	}
}

// size returns the number of counters held.
func (l *local) size() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// syncItem is one counter of a sync cycle: its waiting hits, the window
// (or TAT) of the node's last decision on it, the window this node last
// gave its expiry, and the previous window's count when this node holds
// it final (see entry).
type syncItem struct {
	key     string
	id      uint64
	lim     ratelimit.Limit
	p       [2]pend
	start   int64
	expires int64
	final   int64 // the window start whose previous count prev holds final, or 0
	prev    int64
	// absent marks a first-sight read (takeHeld): merged only while the
	// node still holds no counter k, so that a read that returns after a
	// concurrent decision or a cycle created it does not overwrite it.
	absent bool
}

// item returns counter k, held in e, as a sync item without its waiting
// hits.
func (e *entry) item(k lkey) syncItem {
	it := syncItem{key: k.key, id: k.id, lim: e.lim, start: e.c.Start, expires: e.expires}
	if e.final != 0 && e.final == e.c.Start {
		it.final, it.prev = e.final, e.c.Prev
	}
	return it
}

// takeItem returns counter k, held in e, as a sync item with the hits
// waiting to be pushed, which it hands over.
func (e *entry) takeItem(k lkey) syncItem {
	it := e.item(k)
	it.p = e.pend
	e.pend, e.dirty = [2]pend{}, false
	return it
}

// resetDirty empties the shard's dirty list once its counters were taken.
func (sh *lshard) resetDirty() {
	clear(sh.dirty)
	sh.dirty = sh.dirty[:0]
}

// snapshot drops expired counters, takes the hits waiting to be pushed and
// returns every live counter.
func (l *local) snapshot(now time.Time) []syncItem {
	ns := now.UnixNano()
	var out []syncItem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.liveCounters(ns, func(k lkey, e *entry) {
			out = append(out, e.takeItem(k))
		})
		sh.resetDirty()
		sh.mu.Unlock()
	}
	return out
}

// takeDirty takes the hits waiting to be pushed and returns their
// counters: only the counters used since the previous cycle.
func (l *local) takeDirty() []syncItem {
	var out []syncItem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, k := range sh.dirty {
			if e := sh.m[k]; e != nil && e.dirty {
				out = append(out, e.takeItem(k))
			}
		}
		sh.resetDirty()
		sh.mu.Unlock()
	}
	return out
}

// liveShard is live for the counters of shard i only.
func (l *local) liveShard(now time.Time, i int) []syncItem {
	var out []syncItem
	sh := &l.shards[i]
	sh.mu.Lock()
	sh.liveCounters(now.UnixNano(), func(k lkey, e *entry) {
		out = append(out, e.item(k))
	})
	sh.mu.Unlock()
	return out
}

// live drops expired counters and returns the others, leaving their
// waiting hits in place.
func (l *local) live(now time.Time) []syncItem {
	ns := now.UnixNano()
	var out []syncItem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.liveCounters(ns, func(k lkey, e *entry) {
			out = append(out, e.item(k))
		})
		sh.mu.Unlock()
	}
	return out
}

// holds returns the counter k when this node holds it.
func (l *local) holds(k lkey) (syncItem, bool) {
	sh := l.shard(k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		return syncItem{}, false
	}
	return e.item(k), true
}

// merge replaces a local counter with the total Redis returned and adds
// back the hits counted since the snapshot.
//
// final is remote.Start when remote.Prev is the previous window's final
// count (read from Redis once final, see prevGrace), which the node keeps
// for the rest of the window instead of reading it on every push; 0
// otherwise.
func (l *local) merge(it *syncItem, remote storekit.Counter, nowUs, final int64) {
	sh := l.shard(it.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := lkey{it.key, it.id}
	e := sh.m[k]
	if e != nil && it.absent {
		return
	}
	if e == nil {
		e = &entry{lim: it.lim}
		sh.m[k] = e
	}
	c := remote
	if e.lim.Algorithm == ratelimit.TokenBucket {
		if d := e.pend[0].d; d > 0 {
			c.Start = max(c.Start, nowUs) + d
		}
	} else {
		w := int64(e.lim.Window / time.Millisecond)
		for _, p := range e.pend {
			if p.d != 0 {
				addAt(&c, w, p.start, p.d)
			}
		}
	}
	e.c = c
	e.final = final
}

// counters copies this node's counters of r (zero for those it does not
// hold).
func (l *local) counters(r *ratelimit.Request) []storekit.Counter {
	sh := l.shard(r.Key)
	cs := make([]storekit.Counter, len(r.Limits))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, lim := range r.Limits {
		if e := sh.m[lkey{r.Key, storekit.CounterID(lim)}]; e != nil {
			cs[i] = e.c
		}
	}
	return cs
}

// reset drops this node's counters of key for limits, with the hits they
// had waiting to be pushed.
func (l *local) reset(key string, limits []ratelimit.Limit) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, lim := range limits {
		delete(sh.m, lkey{key, storekit.CounterID(lim)})
	}
}
