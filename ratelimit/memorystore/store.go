// Package memorystore is an in-process ratelimit.Store: a sharded map of
// counters with bounded memory, for a single process or for tests.
package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
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
	// (about 100 MB with short keys).
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
// Entries are keyed by (key, Limit.CounterID()): one small fixed-size
// entry per key and window, with no per-entry pointers besides the key
// string, which the store copies once.
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
// longest window. Leases are never evicted while alive: when a shard holds
// nothing but live leases, a new key gets ratelimit.ErrStoreFull.
//
// The store decides by Request.Now (zero means time.Now()); the sweeper uses
// the wall clock. Decisions on existing keys do not allocate.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	seed     maphash.Seed

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

var _ ratelimit.Store = (*Store)(nil)

// shardData is what a shard holds; shard pads it to two cache lines so
// that two shards' locks never share a line (the adjacent-line prefetcher
// pulls lines in pairs).
type shardData struct {
	mu       sync.Mutex
	counters map[counterKey]entry
	leases   map[string][]lease
}

type shard struct {
	shardData
	_ [128 - unsafe.Sizeof(shardData{})%128]byte
}

// counterKey identifies one counter: a key and a limit's CounterID.
type counterKey struct {
	key string
	id  uint64
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
		seed:     maphash.MakeSeed(),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].counters = make(map[counterKey]entry)
		s.shards[i].leases = make(map[string][]lease)
	}
	if o.SweepInterval > 0 {
		go s.sweepLoop(o.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Take decides r; see ratelimit.Store. It returns an error wrapping
// ratelimit.ErrInvalidLimit for an invalid request, ratelimit.ErrClosed
// after Close, and ratelimit.ErrStoreFull when r needs a new entry in a
// shard full of live leases. Take never waits for anything but one shard's
// lock.
func (s *Store) Take(_ context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if s.closed.Load() {
		return ratelimit.Decision{}, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return ratelimit.Decision{}, fmt.Errorf("memorystore: %w", err)
	}
	if r.Cost < 0 {
		return ratelimit.Decision{}, fmt.Errorf("memorystore: %w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	now := r.Now.UnixNano()

	var inline [4]ratelimit.Counter
	cs := inline[:0]
	if len(r.Limits) > len(inline) {
		cs = make([]ratelimit.Counter, 0, len(r.Limits))
	}
	sh := s.shardOf(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	missing := 0
	for i := range r.Limits {
		e, ok := sh.counters[counterKey{r.Key, r.Limits[i].CounterID()}]
		if !ok {
			missing++
		}
		cs = append(cs, e.c)
	}
	if missing > 0 {
		if !sh.makeRoom(missing, s.perShard, r.Key, now) {
			return ratelimit.Decision{}, fmt.Errorf("memorystore: %w: no room for key %q", ratelimit.ErrStoreFull, r.Key)
		}
	}
	d := ratelimit.Apply(&r, cs)
	key := r.Key
	cloned := false
	for i := range r.Limits {
		l := &r.Limits[i]
		ck := counterKey{key, l.CounterID()}
		if _, ok := sh.counters[ck]; !ok {
			if cs[i] == (ratelimit.Counter{}) {
				continue // nothing to remember
			}
			if !cloned {
				// Copy the key: the caller's string may pin a larger buffer.
				key, cloned = strings.Clone(key), true
				ck.key = key
			}
		}
		sh.counters[ck] = entry{c: cs[i], exp: cs[i].Expiry(*l)}
	}
	return d, nil
}

// makeRoom evicts until n more entries fit in sh, sparing the entries of
// key, and reports whether they fit. sh.mu must be held.
func (sh *shard) makeRoom(n, limit int, key string, now int64) bool {
	for len(sh.counters)+len(sh.leases)+n > limit {
		if !sh.evict(key, now) {
			return false
		}
	}
	return true
}

// evict drops at least one entry of sh other than key's, following the
// rule in Store's comment, and reports whether it could. sh.mu must be
// held.
func (sh *shard) evict(key string, now int64) bool {
	var victim counterKey
	victimExp := int64(0)
	found, dropped := false, false
	seen := 0
	for k, e := range sh.counters {
		if k.key == key {
			continue
		}
		if e.exp <= now {
			delete(sh.counters, k)
			dropped = true
		} else if !found || e.exp < victimExp {
			victim, victimExp, found = k, e.exp, true
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	switch {
	case dropped:
		return true
	case found:
		delete(sh.counters, victim)
		return true
	}
	// Only key's counters and leases are left: drop lapsed lease sets.
	for k, ls := range sh.leases {
		if k != key && allLapsed(ls, now) {
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

	sh := s.shardOf(r.Key)
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
		if !existed && !sh.makeRoom(1, s.perShard, r.Key, now) {
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
	sh := s.shardOf(key)
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
		n += len(sh.counters) + len(sh.leases)
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
		for k, e := range sh.counters {
			if e.exp <= now {
				delete(sh.counters, k)
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
