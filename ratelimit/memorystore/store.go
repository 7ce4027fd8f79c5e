// Package memorystore is an in-process ratelimit.Store: a sharded map of
// counters with bounded memory, for a single process or for tests.
package memorystore

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/internal/access"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Options configures a Store. The zero value is ready to use: every zero
// field takes its documented default.
type Options struct {
	// MaxKeys bounds the number of entries the store holds: one per key and
	// limit window (a key checked against a per-second and a per-minute
	// limit takes two), plus one per key that has live leases. It is
	// enforced per shard, each holding at most MaxKeys/Shards rounded up.
	// See Store for what happens when a shard is full. A shard's table
	// never exceeds the smallest power of two at least twice its share
	// (48-byte slots): at the default 1,000,000, 8192 slots per shard, or
	// about 100 MB.
	MaxKeys int
	// Shards is the number of independently locked parts of the store,
	// rounded up to a power of two and capped at MaxKeys. More shards mean
	// less contention between goroutines. Default 256.
	Shards int
	// SweepInterval is how often the sweeper drops entries that no longer
	// affect any decision. Zero means one minute; a negative value disables
	// the sweeper, leaving dead entries to eviction.
	SweepInterval time.Duration
}

const (
	defaultMaxKeys       = 1_000_000
	defaultShards        = 256
	defaultSweepInterval = time.Minute
	// evictionSample is how many entries a full shard looks at to choose
	// the one to evict.
	evictionSample = 5
)

// A Store keeps counters and leases in process memory. It is safe for
// concurrent use. Its memory is bounded: entries that can no longer affect
// a decision are dropped by a sweeper goroutine (every SweepInterval; Close
// stops it), and each of the Shards holds at most MaxKeys/Shards entries,
// evicting the one that would expire first when full, so size MaxKeys above
// the keys active within your longest window. When nothing can be evicted a
// call returns ratelimit.ErrStoreFull. Decisions use Request.Now (zero
// means time.Now()); decisions on existing keys with up to four limits do
// not allocate. An idle key costs about 100 bytes.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	k1, k2   uint64 // the points of the key hash (hash.go)

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

var (
	_ ratelimit.Allower    = (*Store)(nil)
	_ ratelimit.LeaseStore = (*Store)(nil)
)

// shardData is what a shard holds; shard pads it to two cache lines so
// that two shards' locks never share a line (the adjacent-line prefetcher
// pulls lines in pairs).
type shardData struct {
	mu sync.Mutex
	// tab holds the counters, by linear probing from the low bits of
	// their fingerprint's second half (the first half chose the shard).
	// Its length is a power of two (or 0), at most 3/4 of it in use.
	// Dropping a counter leaves a tombstone, so that a slot found stays
	// where it is until the table is rebuilt (rebuild); probes pass over
	// tombstones and inserts reuse them.
	tab  []slot
	live int // counters in tab
	used int // counters and tombstones in tab
	// next holds, by fingerprint, the units a counter has reserved in the
	// window after its current one (storekit.Counter.Next); nil until a
	// reservation needs it.
	next map[fingerprint]int64
	// leases maps a key to its leases. A slice, not a map: Max is small in
	// practice and a linear scan of a few ids beats hashing them.
	leases map[string][]lease
}

// slot is one place of a shard's table: empty (fingerprint zero), a
// tombstone (fingerprint tombstone) or a counter.
type slot struct {
	fp fingerprint
	e  entry
}

var tombstone = fingerprint{0, 1}

// holds reports whether the slot holds a counter.
func (s *slot) holds() bool { return s.fp != (fingerprint{}) && s.fp != tombstone }

type shard struct {
	shardData
	_ [128 - unsafe.Sizeof(shardData{})%128]byte
}

// entry is one counter (storekit.Counter's Start, Cur and Prev) with the
// time (Unix ns) after which it is dead. The units a counter holds
// reserved in its next window are kept in its shard's next map, so that a
// slot stays 48 bytes.
type entry struct {
	start, cur, prev int64
	exp              int64
}

type lease struct {
	id  string
	exp int64 // Unix ns; the lease is alive while now < exp
}

// A fingerprint identifies a counter: a 128-bit hash of a key and a limit's
// CounterID (hash.go).
type fingerprint struct{ a, b uint64 }

// find returns the slot of fingerprint k in sh's table, or -1.
func (sh *shard) find(k fingerprint) int {
	if len(sh.tab) == 0 {
		return -1
	}
	mask := uint64(len(sh.tab) - 1)
	for i := k.b & mask; ; i = (i + 1) & mask {
		switch sh.tab[i].fp {
		case k:
			return int(i)
		case fingerprint{}:
			return -1
		}
	}
}

// insert stores e under k, which sh's table does not hold, growing the
// table first when it would be more than 3/4 in use.
func (sh *shard) insert(k fingerprint, e entry) {
	if (sh.used+1)*4 > len(sh.tab)*3 {
		sh.rebuild()
	}
	mask := uint64(len(sh.tab) - 1)
	for i := k.b & mask; ; i = (i + 1) & mask {
		switch sh.tab[i].fp {
		case fingerprint{}:
			sh.used++
		case tombstone:
		default:
			continue
		}
		sh.tab[i] = slot{k, e}
		sh.live++
		return
	}
}

// rebuild makes sh's table anew without its tombstones, sized by
// tableSize for one more counter than it holds: twice as large when an
// insert found it 3/4 in use with more than half of it counters, the same
// size when tombstones made up the rest, smaller when a sweep left few
// counters. Under churn at a steady number of keys it keeps its size.
func (sh *shard) rebuild() {
	old := sh.tab
	sh.tab, sh.live, sh.used = make([]slot, tableSize(sh.live+1)), 0, 0
	for i := range old {
		if old[i].holds() {
			sh.insert(old[i].fp, old[i].e)
		}
	}
}

// tableSize is the size of a table rebuilt for n counters: the smallest
// power of two, at least 8, that they fill to at most half. A table grows
// when 3/4 full, so it is 3/8 to 3/4 full of counters and tombstones.
func tableSize(n int) int {
	size := 8
	for size < 2*n {
		size *= 2
	}
	return size
}

// tidy rebuilds sh's table after drops when it would be smaller or a
// quarter of it is tombstones.
func (sh *shard) tidy() {
	if tableSize(sh.live+1) < len(sh.tab) || (sh.used-sh.live)*4 > len(sh.tab) {
		sh.rebuild()
	}
}

// drop deletes the counter in slot i.
func (sh *shard) drop(i int) {
	if len(sh.next) != 0 {
		delete(sh.next, sh.tab[i].fp)
	}
	sh.tab[i] = slot{fp: tombstone}
	sh.live--
}

// New returns a store configured by o, with its sweeper running. Call
// Close to stop it.
func New(o Options) *Store {
	if o.MaxKeys <= 0 {
		o.MaxKeys = defaultMaxKeys
	}
	if o.Shards <= 0 {
		o.Shards = defaultShards
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = defaultSweepInterval
	}
	n := min(o.Shards, o.MaxKeys)
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	s := &Store{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: (o.MaxKeys + n - 1) / n,
		k1:       rand.Uint64N(maxPoint),
		k2:       rand.Uint64N(maxPoint),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].leases = make(map[string][]lease)
	}
	if o.SweepInterval > 0 {
		go s.sweepLoop(o.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

func (s *Store) shardOf(h1 uint64) *shard { return &s.shards[h1&s.mask] }

// Take decides r; see ratelimit.Store. It returns an error wrapping
// ratelimit.ErrInvalidLimit for an invalid request, ratelimit.ErrClosed
// after Close, and ratelimit.ErrStoreFull when r needs a new entry in a
// shard full of live leases. Take never waits for anything but one shard's
// lock.
//
// d is a named result so that Apply's decision is not copied on its way
// out: a Decision is a few hundred bytes.
func (s *Store) Take(_ context.Context, r ratelimit.Request) (d ratelimit.Decision, err error) {
	_, err = s.decide(&r, &d, r.AllowOnly)
	return d, err
}

// Allow is Take with r.AllowOnly that only answers whether the call is
// allowed; see ratelimit.Allower. Errors are as for Take.
func (s *Store) Allow(_ context.Context, r ratelimit.Request) (bool, error) {
	if allowed, ok := s.allowExisting(&r); ok {
		return allowed, nil
	}
	return s.decide(&r, nil, true)
}

// AllowChecked is the path of ratelimit.Limiter's Allow into the store: a
// call of cost 1 for key against limits the Limiter validated, at now
// (Unix ns), answered as Allow answers it. It cannot be called from outside
// this module.
func (s *Store) AllowChecked(key string, limits access.Checked[ratelimit.Limit], now int64, penalty bool) (bool, error) {
	ls := limits.Limits()
	if len(ls) != 1 || s.closed.Load() {
		return s.allowChecked(key, ls, now, penalty)
	}
	// One limit: decided in place when its counter exists, as
	// allowExisting does.
	l := &ls[0]
	h1, h2 := s.keyHash(key)
	k := fingerprintOf(h1, h2, storekit.CounterID(*l))
	sh := s.shardOf(h1)
	sh.mu.Lock()
	p := sh.find(k)
	if p < 0 {
		sh.mu.Unlock()
		return s.allowChecked(key, ls, now, penalty)
	}
	// The counter is read and written back in place: sh.counter and
	// sh.entryOf, but for the sh.next lookup and expiry when they did not
	// change.
	e := &sh.tab[p].e
	c := storekit.Counter{Start: e.start, Cur: e.cur, Prev: e.prev}
	if len(sh.next) != 0 {
		c.Next = sh.next[k]
	}
	next := c.Next
	allowed := storekit.TryAllowOne(l, &c, 1, now) || applyOne(key, ls, now, penalty, &c)
	switch {
	case c.Next != next: // sh.next follows it
		*e = sh.entryOf(k, c, *l)
	case c.Start != e.start: // the expiry follows it
		*e = entry{start: c.Start, cur: c.Cur, prev: c.Prev, exp: c.Expiry(*l)}
	default:
		e.cur, e.prev = c.Cur, c.Prev
	}
	sh.mu.Unlock()
	return allowed, nil
}

// allowChecked is AllowChecked through Allow.
func (s *Store) allowChecked(key string, ls []ratelimit.Limit, now int64, penalty bool) (bool, error) {
	return s.Allow(context.Background(), ratelimit.Request{Key: key, Limits: ls, Cost: 1, Now: time.Unix(0, now), Penalty: penalty, AllowOnly: true})
}

// applyOne is AllowChecked's call of storekit.Apply, for a call
// TryAllowOne did not allow; apart, so that AllowChecked's frame stays
// small.
func applyOne(key string, ls []ratelimit.Limit, now int64, penalty bool, c *storekit.Counter) bool {
	r := ratelimit.Request{Key: key, Limits: ls, Cost: 1, Now: time.Unix(0, now), Penalty: penalty, AllowOnly: true}
	return storekit.Apply(&r, unsafe.Slice(c, 1)).Allowed
}

// allowExisting decides r on the allow-only path, in place in the table,
// when r is valid, no peek, of up to four limits, and every counter it
// needs exists; ok reports whether it did. Otherwise it changes nothing
// and decide takes the call (new counters, eviction, errors).
func (s *Store) allowExisting(r *ratelimit.Request) (allowed, ok bool) {
	const n = 4
	if len(r.Limits) > n || r.Peek || r.Cost < 0 || s.closed.Load() || ratelimit.ValidateLimits(r.Limits) != nil {
		return false, false
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	var (
		cs  [n]storekit.Counter
		pos [n]int
	)
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	for i := range r.Limits {
		p := sh.find(fingerprintOf(h1, h2, storekit.CounterID(r.Limits[i])))
		if p < 0 {
			sh.mu.Unlock()
			return false, false
		}
		pos[i], cs[i] = p, sh.counter(p)
	}
	c := cs[:len(r.Limits)]
	allowed = storekit.TryAllow(r, c) || storekit.Apply(r, c).Allowed
	for i := range c {
		p := pos[i]
		switch was := sh.counter(p); {
		case c[i] == was:
		case c[i].Start != was.Start || c[i].Next != was.Next: // the expiry follows them
			sh.tab[p].e = sh.entryOf(sh.tab[p].fp, c[i], r.Limits[i])
		default:
			sh.tab[p].e.cur, sh.tab[p].e.prev = c[i].Cur, c[i].Prev
		}
	}
	sh.mu.Unlock()
	return allowed, true
}

// decide decides r, on the allow-only path if allowOnly, and reports
// whether it was allowed. The decision goes to d unless d is nil.
func (s *Store) decide(r *ratelimit.Request, d *ratelimit.Decision, allowOnly bool) (bool, error) {
	if s.closed.Load() {
		return false, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return false, fmt.Errorf("memorystore: %w", err)
	}
	if r.Cost < 0 {
		return false, fmt.Errorf("memorystore: %w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if r.Peek {
		return s.peek(r, d), nil
	}
	now := r.Now.UnixNano()

	// Up to four limits are decided without allocating.
	var (
		inlineC   [4]storekit.Counter
		inlinePos [4]int64
	)
	cs, pos := inlineC[:0], inlinePos[:0]
	if len(r.Limits) > len(inlineC) {
		cs = make([]storekit.Counter, 0, len(r.Limits))
		pos = make([]int64, 0, len(r.Limits))
	}
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	missing := 0
	for i := range r.Limits {
		if p := sh.find(fingerprintOf(h1, h2, storekit.CounterID(r.Limits[i]))); p >= 0 {
			cs = append(cs, sh.counter(p))
			pos = append(pos, int64(p))
		} else {
			cs = append(cs, storekit.Counter{})
			pos = append(pos, -1)
			missing++
		}
	}
	// Eviction spares the slots found, and leaves tombstones: they stay
	// where they are until an insert rebuilds the table.
	if missing > 0 && !sh.makeRoom(missing, s.perShard, pos, now) {
		sh.mu.Unlock()
		return false, fmt.Errorf("memorystore: %w: no room for key %q", ratelimit.ErrStoreFull, r.Key)
	}
	var allowed bool
	switch {
	case allowOnly && storekit.TryAllow(r, cs):
		allowed = true
		if d != nil {
			d.Allowed, d.Denied = true, -1
		}
	case d == nil:
		allowed = storekit.Apply(r, cs).Allowed
	default:
		*d = storekit.Apply(r, cs)
		allowed = d.Allowed
	}
	for i := range r.Limits {
		if p := pos[i]; p >= 0 {
			sh.tab[p].e = sh.entryOf(sh.tab[p].fp, cs[i], r.Limits[i])
		}
	}
	sh.insertNew(h1, h2, r.Limits, pos, cs) // after the writes in place: an insert may move every slot
	sh.mu.Unlock()
	return allowed, nil
}

// makeRoom evicts until n more entries fit in sh, sparing the slots in
// spare (negative ones are ignored), and reports whether they fit. sh.mu
// must be held.
func (sh *shard) makeRoom(n, limit int, spare []int64, now int64) bool {
	for sh.live+len(sh.leases)+n > limit {
		if !sh.evict(spare, now) {
			return false
		}
	}
	return true
}

// evict drops at least one entry of sh, sparing the slots in spare and
// following the rule in Store's comment, and reports whether it could.
// The sample is the first counters found from a random slot on. sh.mu must
// be held.
func (sh *shard) evict(spare []int64, now int64) bool {
	victim, victimExp := -1, int64(0)
	dropped := false
	seen := 0
	if n := len(sh.tab); n > 0 {
		start := rand.IntN(n)
		for j := range n {
			p := (start + j) & (n - 1)
			if !sh.tab[p].holds() || slices.Contains(spare, int64(p)) {
				continue
			}
			if exp := sh.tab[p].e.exp; exp <= now {
				sh.drop(p)
				dropped = true
			} else if victim < 0 || exp < victimExp {
				victim, victimExp = p, exp
			}
			if seen++; seen == evictionSample {
				break
			}
		}
	}
	switch {
	case dropped:
		return true
	case victim >= 0:
		sh.drop(victim)
		return true
	}
	// Only spared counters and leases are left: drop lapsed lease sets.
	for k, ls := range sh.leases {
		if allLapsed(ls, now) {
			delete(sh.leases, k)
			return true
		}
	}
	return false
}

func allLapsed(ls []lease, now int64) bool {
	for _, l := range ls {
		if l.exp > now {
			return false
		}
	}
	return true
}

// Acquire takes one lease; see ratelimit.Store. Lapsed leases of the key
// are dropped before the check. Errors are as for Take.
func (s *Store) Acquire(_ context.Context, r ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	if s.closed.Load() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	if err := storekit.ValidateLease(&r); err != nil {
		return ratelimit.Lease{}, fmt.Errorf("memorystore: %w", err)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	now := r.Now.UnixNano()
	exp := now + int64(r.TTL)
	if exp < now { // a TTL of centuries: the lease never lapses
		exp = math.MaxInt64
	}

	h1, _ := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls, existed := sh.leases[r.Key]
	live := ls[:0]
	held := -1
	for _, l := range ls {
		if l.exp > now {
			if l.id == r.ID {
				held = len(live)
			}
			live = append(live, l)
		}
	}
	clear(ls[len(live):]) // let dropped ids be collected
	ls = live

	var out ratelimit.Lease
	switch {
	case held >= 0:
		ls[held].exp = exp
		out.Allowed = true
	case int64(len(ls)) < r.Max:
		if !existed && !sh.makeRoom(1, s.perShard, nil, now) {
			return ratelimit.Lease{}, fmt.Errorf("memorystore: %w: no room for key %q", ratelimit.ErrStoreFull, r.Key)
		}
		ls = append(ls, lease{id: strings.Clone(r.ID), exp: exp})
		out.Allowed = true
	default:
		first := ls[0].exp
		for _, l := range ls[1:] {
			first = min(first, l.exp)
		}
		out.RetryAfter = time.Duration(first - now)
	}
	out.Active = int64(len(ls))
	out.Remaining = max(r.Max-out.Active, 0)
	if out.Allowed {
		out.Expires = time.Unix(0, exp)
	}
	switch {
	case len(ls) == 0:
		delete(sh.leases, r.Key)
	case existed:
		sh.leases[r.Key] = ls
	default:
		sh.leases[strings.Clone(r.Key)] = ls
	}
	return out, nil
}

// Release ends the lease id on key; releasing an unknown, released or
// lapsed lease is not an error. It returns ratelimit.ErrClosed after Close.
func (s *Store) Release(_ context.Context, key, id string) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	h1, _ := s.keyHash(key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls, ok := sh.leases[key]
	if !ok {
		return nil
	}
	for i := range ls {
		if ls[i].id == id {
			last := len(ls) - 1
			ls[i] = ls[last]
			ls[last] = lease{}
			ls = ls[:last]
			break
		}
	}
	if len(ls) == 0 {
		delete(sh.leases, key)
	} else {
		sh.leases[key] = ls
	}
	return nil
}

// Len returns the number of entries held: counters plus keys with leases.
// Under concurrent use it is a snapshot taken one shard at a time.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live + len(sh.leases)
		sh.mu.Unlock()
	}
	return n
}

// Close stops the sweeper and waits for it to return. Later calls of the
// store return ratelimit.ErrClosed; calls already running complete. Close
// is idempotent.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
	}
	<-s.done
	return nil
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep(time.Now().UnixNano())
		}
	}
}

// sweep drops the entries that are dead at now (Unix ns), one shard at a
// time.
func (s *Store) sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for p := range sh.tab {
			if sh.tab[p].holds() && sh.tab[p].e.exp <= now {
				sh.drop(p)
			}
		}
		sh.tidy()
		for k, ls := range sh.leases {
			if allLapsed(ls, now) {
				delete(sh.leases, k)
			}
		}
		sh.mu.Unlock()
	}
}

// insertNew stores the counters of limits that had no slot (pos[i] < 0)
// and are not empty. It runs after the writes in place, since an insert
// may move every slot.
func (sh *shard) insertNew(h1, h2 uint64, limits []ratelimit.Limit, pos []int64, cs []storekit.Counter) {
	for i := range limits {
		if pos[i] >= 0 || cs[i] == (storekit.Counter{}) {
			continue // written, or nothing to remember
		}
		k := fingerprintOf(h1, h2, storekit.CounterID(limits[i]))
		e := sh.entryOf(k, cs[i], limits[i])
		if p := sh.find(k); p >= 0 { // two limits of one window
			sh.tab[p].e = e
			continue
		}
		sh.insert(k, e)
	}
}
