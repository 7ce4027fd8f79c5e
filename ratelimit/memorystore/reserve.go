package memorystore

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

var _ ratelimit.Reserver = (*Store)(nil)

// Reserve takes r.Cost units of r.Key for a later moment; see
// ratelimit.Reserver. Errors are as for Take.
func (s *Store) Reserve(_ context.Context, r ratelimit.Request, maxDelay time.Duration) (ratelimit.Booking, error) {
	var b ratelimit.Booking
	err := s.update(&r, true, func(cs []storekit.Counter) { b = storekit.Reserve(&r, maxDelay, cs) })
	return b, err
}

// Unreserve gives back what b took; see ratelimit.Reserver. Errors are as
// for Take.
func (s *Store) Unreserve(_ context.Context, r ratelimit.Request, b ratelimit.Booking) error {
	return s.update(&r, false, func(cs []storekit.Counter) { storekit.Unreserve(&r, b, cs) })
}

// update checks r, hands f the counters of r.Limits under their shard's
// lock and stores what f left in them: every counter when create is set,
// otherwise only those that exist.
func (s *Store) update(r *ratelimit.Request, create bool, f func([]storekit.Counter)) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return fmt.Errorf("memorystore: %w", err)
	}
	if r.Cost < 0 {
		return fmt.Errorf("memorystore: %w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	now := r.Now.UnixNano()
	cs := make([]storekit.Counter, len(r.Limits))
	pos := make([]int64, len(r.Limits))
	h1, h2 := s.keyHash(r.Key)
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	missing := 0
	for i := range r.Limits {
		pos[i] = int64(sh.find(fingerprintOf(h1, h2, storekit.CounterID(r.Limits[i]))))
		if pos[i] >= 0 {
			cs[i] = sh.counter(int(pos[i]))
		} else {
			missing++
		}
	}
	if create && missing > 0 && !sh.makeRoom(missing, s.perShard, pos, now) {
		return fmt.Errorf("memorystore: %w: no room for key %q", ratelimit.ErrStoreFull, r.Key)
	}
	f(cs)
	for i := range r.Limits {
		if p := pos[i]; p >= 0 {
			sh.tab[p].e = sh.entryOf(sh.tab[p].fp, cs[i], r.Limits[i])
		}
	}
	if !create {
		return nil
	}
	sh.insertNew(h1, h2, r.Limits, pos, cs)
	return nil
}

// counter returns the counter in slot p of sh's table, with the units it
// has reserved in its next window.
func (sh *shard) counter(p int) storekit.Counter {
	e := &sh.tab[p].e
	c := storekit.Counter{Start: e.start, Cur: e.cur, Prev: e.prev}
	if len(sh.next) != 0 {
		c.Next = sh.next[sh.tab[p].fp]
	}
	return c
}

// entryOf returns the entry that holds c, the counter of l under k, and
// keeps c.Next in sh.next.
func (sh *shard) entryOf(k fingerprint, c storekit.Counter, l ratelimit.Limit) entry {
	switch {
	case c.Next != 0:
		if sh.next == nil {
			sh.next = make(map[fingerprint]int64)
		}
		sh.next[k] = c.Next
	case len(sh.next) != 0:
		delete(sh.next, k)
	}
	return entry{start: c.Start, cur: c.Cur, prev: c.Prev, exp: c.Expiry(l)}
}
