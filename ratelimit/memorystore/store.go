// Package memorystore is an in-process ratelimit.Store: a sharded map of
// counters with bounded memory, for a single process or for tests.
package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Options configures a Store. The zero value is ready to use: every zero
// field takes its documented default.
type Options struct {
	// MaxKeys bounds the number of entries the store holds: one per key and
	// limit window (a key checked against a per-second and a per-minute
	// limit takes two), plus one per key that has live leases. It is
	// enforced per shard, each holding at most MaxKeys/Shards rounded up.
	// See Store for what happens when a shard is full. Default 1,000,000
	// (about 100 MB at the worst point of Go's map growth).
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
// concurrent use; calls on keys of different shards never contend.
//
// Each counter (one per key and limit window, see Limit.CounterID) is a
// 32-byte entry in a per-shard slab, found through a map from a 128-bit
// fingerprint of the key and window to the entry's position. The store
// keeps no copy of counter keys and no per-entry pointers: at a million
// idle keys a key costs about 96 bytes. Two keys share a counter only if two
// independently seeded 64-bit hashes of them both collide, a chance of
// about 2^-128 per pair of keys: never, in practice.
//
// Memory is bounded in two ways. Idle entries die: a counter is dead once
// it can no longer affect a decision (ratelimit.Counter.Expiry: two windows
// after the start of its last window, or when a token bucket is full), a
// lease set once its last lease has lapsed. The sweeper, a goroutine owned
// by the Store, drops dead entries every SweepInterval, locking one shard at
// a time, never the whole store.
//
// And each shard holds at most MaxKeys/Shards entries. When a new entry
// does not fit, the shard evicts, Redis-style: it looks at a sample of 5
// of its counters (Go's map iteration starts at a random place) and drops
// the dead ones among them; if none is dead, it drops the one that would
// die first (Redis's volatile-ttl policy). Evicting a live counter forgets
// its count, so size MaxKeys above the number of keys active within your
// longest window. Leases are never evicted while alive, nor the counters
// of the key being decided: when a shard holds nothing else, a new entry
// gets ratelimit.ErrStoreFull.
//
// The store decides by Request.Now (zero means time.Now()); the sweeper uses
// the wall clock. Decisions on existing keys with up to four limits do not
// allocate.
type Store struct {
	shards       []shard
	mask         uint64
	perShard     int
	seed1, seed2 maphash.Seed

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

var _ ratelimit.Store = (*Store)(nil)

// shardData is what a shard holds; shard pads it to two cache lines so
// that two shards' locks never share a line (the adjacent-line prefetcher
// pulls lines in pairs).
//
// Counters live by value in a slab; the map only indexes them. A decision on
// an existing key then updates the slab in place and never writes the map,
// and a map slot is 24 bytes.
type shardData struct {
	mu    sync.Mutex
	index map[fingerprint]uint32 // -> slab position
	// slab holds the entries in fixed-size chunks, so that growing it
	// never copies it nor leaves more than one chunk unused.
	slab []*[chunkSize]entry
	used uint32   // positions handed out so far
	free []uint32 // positions handed out and since dropped
	// leases maps a key to its leases. A slice, not a map: Max is small in
	// practice and a linear scan of a few ids beats hashing them.
	leases map[string][]lease
}

type shard struct {
	shardData
	_ [128 - unsafe.Sizeof(shardData{})%128]byte
}

// entry is one counter with the time (Unix ns) after which it is dead.
type entry struct {
	c   ratelimit.Counter
	exp int64
}

type lease struct {
	id  string
	exp int64 // Unix ns; the lease is alive while now < exp
}

// A fingerprint identifies a counter: a 128-bit hash of a key and a limit's
// CounterID.
type fingerprint struct{ a, b uint64 }

// keyHash returns two independent hashes of key.
func (s *Store) keyHash(key string) (h1, h2 uint64) {
	return maphash.String(s.seed1, key), maphash.String(s.seed2, key)
}

// fingerprintOf combines key's hashes with a counter id. Multiplying by an
// odd constant and xoring are both one-to-one, so one key's windows never
// share a fingerprint; two keys' fingerprints collide only if both their
// hashes do.
func fingerprintOf(h1, h2, id uint64) fingerprint {
	return fingerprint{h1 ^ id*0x9e3779b97f4a7c15, h2 ^ id*0xc2b2ae3d27d4eb4f}
}

const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
)

// at returns the entry at slab position p.
func (sh *shard) at(p uint32) *entry { return &sh.slab[p>>chunkBits][p&(chunkSize-1)] }

// put stores e in a free slab position and returns it.
func (sh *shard) put(e entry) uint32 {
	var p uint32
	if n := len(sh.free); n > 0 {
		p = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		if sh.used == uint32(len(sh.slab))*chunkSize {
			sh.slab = append(sh.slab, new([chunkSize]entry))
		}
		p = sh.used
		sh.used++
	}
	*sh.at(p) = e
	return p
}

// drop deletes the fingerprint k, which points at p.
func (sh *shard) drop(k fingerprint, p uint32) {
	delete(sh.index, k)
	*sh.at(p) = entry{}
	sh.free = append(sh.free, p)
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
		seed1:    maphash.MakeSeed(),
		seed2:    maphash.MakeSeed(),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].index = make(map[fingerprint]uint32)
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
	if s.closed.Load() {
		return d, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return d, fmt.Errorf("memorystore: %w", err)
	}
	if r.Cost < 0 {
		return d, fmt.Errorf("memorystore: %w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	now := r.Now.UnixNano()

	// Up to four limits are decided without allocating.
	var (
		inlineC   [4]ratelimit.Counter
		inlinePos [4]int64
	)
	cs, pos := inlineC[:0], inlinePos[:0]
	if len(r.Limits) > len(inlineC) {
		cs = make([]ratelimit.Counter, 0, len(r.Limits))
		pos = make([]int64, 0, len(r.Limits))
	}
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	missing := 0
	for i := range r.Limits {
		if p, ok := sh.index[fingerprintOf(h1, h2, r.Limits[i].CounterID())]; ok {
			cs = append(cs, sh.at(p).c)
			pos = append(pos, int64(p))
		} else {
			cs = append(cs, ratelimit.Counter{})
			pos = append(pos, -1)
			missing++
		}
	}
	// Eviction spares the positions found, so they stay valid.
	if missing > 0 && !sh.makeRoom(missing, s.perShard, pos, now) {
		sh.mu.Unlock()
		return d, fmt.Errorf("memorystore: %w: no room for key %q", ratelimit.ErrStoreFull, r.Key)
	}
	d = ratelimit.Apply(&r, cs)
	for i := range r.Limits {
		e := entry{c: cs[i], exp: cs[i].Expiry(r.Limits[i])}
		if pos[i] >= 0 {
			*sh.at(uint32(pos[i])) = e
			continue
		}
		if e.c == (ratelimit.Counter{}) {
			continue // nothing to remember
		}
		k := fingerprintOf(h1, h2, r.Limits[i].CounterID())
		if p, ok := sh.index[k]; ok { // two limits of one window
			*sh.at(p) = e
			continue
		}
		sh.index[k] = sh.put(e)
	}
	sh.mu.Unlock()
	return d, nil
}

// makeRoom evicts until n more entries fit in sh, sparing the slab
// positions in spare (negative ones are ignored), and reports whether they
// fit. sh.mu must be held.
func (sh *shard) makeRoom(n, limit int, spare []int64, now int64) bool {
	for len(sh.index)+len(sh.leases)+n > limit {
		if !sh.evict(spare, now) {
			return false
		}
	}
	return true
}

// evict drops at least one entry of sh, sparing the slab positions in
// spare and following the rule in Store's comment, and reports whether it
// could. sh.mu must be held.
func (sh *shard) evict(spare []int64, now int64) bool {
	var victim fingerprint
	var victimPos uint32
	victimExp := int64(0)
	found, dropped := false, false
	seen := 0
	for k, p := range sh.index {
		if slices.Contains(spare, int64(p)) {
			continue
		}
		if exp := sh.at(p).exp; exp <= now {
			sh.drop(k, p)
			dropped = true
		} else if !found || exp < victimExp {
			victim, victimPos, victimExp, found = k, p, exp, true
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	switch {
	case dropped:
		return true
	case found:
		sh.drop(victim, victimPos)
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
	if err := ratelimit.ValidateLease(&r); err != nil {
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
		n += len(sh.index) + len(sh.leases)
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
		for k, p := range sh.index {
			if sh.at(p).exp <= now {
				sh.drop(k, p)
			}
		}
		for k, ls := range sh.leases {
			if allLapsed(ls, now) {
				delete(sh.leases, k)
			}
		}
		sh.mu.Unlock()
	}
}
