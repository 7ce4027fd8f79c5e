package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seed-008287da/sluice/ratelimit"
)

// sweepInterval is how often a store that does not sync periodically drops
// expired local counters.
const sweepInterval = 30 * time.Second

// loop runs sync cycles (or sweeps) until Close.
func (s *Store) loop() {
	defer s.wg.Done()
	interval := s.opts.SyncRate
	if interval <= 0 {
		interval = sweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.cycleTimeout())
			s.Sync(ctx, now)
			cancel()
		}
	}
}

// cycleTimeout bounds one sync pipeline: it carries every key of the
// namespace, so it may take longer than one decision's call.
func (s *Store) cycleTimeout() time.Duration { return max(s.opts.Timeout, time.Second) }

// syncItem is one counter of a sync cycle.
type syncItem struct {
	key string
	id  uint64
	lim ratelimit.Limit
	p   [2]pend
}

// snapshot drops expired counters, takes the hits waiting to be pushed and
// returns every live counter.
func (l *local) snapshot(now time.Time) []syncItem {
	ns := now.UnixNano()
	var out []syncItem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.pend[0].d == 0 && e.pend[1].d == 0 && e.c.Expiry(e.lim) < ns {
				delete(sh.m, k)
				continue
			}
			out = append(out, syncItem{key: k.key, id: k.id, lim: e.lim, p: e.pend})
			e.pend = [2]pend{}
		}
		sh.mu.Unlock()
	}
	return out
}

// merge replaces a local counter with the total Redis returned and adds
// back the hits counted since the snapshot.
func (l *local) merge(it *syncItem, remote ratelimit.Counter, nowUs int64) {
	sh := l.shard(it.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := lkey{it.key, it.id}
	e := sh.m[k]
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
}

// Sync runs one cycle at time now. With SyncRate > 0 it pushes the hits
// counted since the last cycle and pulls every counter's total, all in one
// pipeline; in every mode it drops local counters that expired. The store
// runs it every SyncRate unless ManualSync is set.
//
// Hits of a cycle whose push fails are not pushed again (they may have
// reached Redis before the failure), as Kong does; while the store is in
// fallback, hits are kept and pushed by the first cycle after Redis
// returns. A failed cycle returns the error; it is also logged once by the
// state change it causes.
func (s *Store) Sync(ctx context.Context, now time.Time) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.opts.SyncRate <= 0 || !s.br.allow(now) {
		s.local.sweep(now)
		return nil
	}
	items := s.local.snapshot(now)
	if len(items) == 0 {
		s.syncs.Add(1)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cycleTimeout())
	defer cancel()
	if s.opts.KongLayout {
		if err := s.syncKong(ctx, now, items); err != nil {
			s.record(now, err)
			return err
		}
		s.br.success()
		s.syncs.Add(1)
		return nil
	}
	// Counters with hits to push go through sync.lua; the others only need
	// their total, which a plain GET gives for a fraction of a script's
	// cost on the server (a cycle pulls every live counter, Kong's
	// semantics, so most of them are idle ones).
	nowArg := s.nowArg(now)
	var push, pull []int
	for i := range items {
		if items[i].p[0].d != 0 || items[i].p[1].d != 0 {
			push = append(push, i)
		} else {
			pull = append(pull, i)
		}
	}
	calls := make([]call, len(push))
	for j, i := range push {
		it := &items[i]
		kind, w := int64(2), int64(0)
		switch it.lim.Algorithm {
		case ratelimit.FixedWindow:
			kind, w = 0, int64(it.lim.Window/time.Millisecond)
		case ratelimit.SlidingWindow:
			kind, w = 1, int64(it.lim.Window/time.Millisecond)
		}
		calls[j] = call{
			keys: []string{s.counterKey(it.key, it.id)},
			args: []string{nowArg, strconv.FormatInt(kind, 10), strconv.FormatInt(w, 10),
				strconv.FormatInt(it.p[0].start, 10), strconv.FormatInt(it.p[0].d, 10),
				strconv.FormatInt(it.p[1].start, 10), strconv.FormatInt(it.p[1].d, 10), s.minTTL()},
		}
	}
	nowUs := now.UnixMicro()
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	if len(push) > 0 {
		res, trips := syncScript.execMulti(ctx, s.rc, calls)
		s.redisCalls.Add(uint64(trips))
		for j, r := range res {
			vals, err := r.ToArray()
			if err != nil {
				err = replyErr("sync.lua", err)
			} else if len(vals) != 3 {
				err = fmt.Errorf("%w: sync.lua returned %d values, want 3", ErrBadReply, len(vals))
			}
			var v []int64
			if err == nil {
				if v, err = int64s(vals); err != nil {
					err = fmt.Errorf("%w: sync.lua: %w", ErrBadReply, err)
				}
			}
			if err != nil {
				fail(err)
				continue
			}
			s.local.merge(&items[push[j]], ratelimit.Counter{Start: v[0], Cur: v[1], Prev: v[2]}, nowUs)
		}
	}
	if len(pull) > 0 {
		res, trips := doMulti(ctx, s.rc, len(pull), func(j int) rueidis.Completed {
			it := &items[pull[j]]
			return s.rc.B().Get().Key(s.counterKey(it.key, it.id)).Build()
		})
		s.redisCalls.Add(uint64(trips))
		for j, r := range res {
			c, err := parseCounter(r)
			if err != nil {
				fail(err)
				continue
			}
			s.local.merge(&items[pull[j]], c, nowUs)
		}
	}
	if firstErr != nil {
		s.unavailable(now, firstErr)
		return firstErr
	}
	s.br.success()
	s.syncs.Add(1)
	return nil
}

// parseCounter reads a counter as GET returns it: the string "s c p" that
// the scripts write (see take.lua), or nil for a counter Redis does not
// hold (the zero Counter).
func parseCounter(r rueidis.RedisResult) (ratelimit.Counter, error) {
	v, err := r.ToString()
	if rueidis.IsRedisNil(err) {
		return ratelimit.Counter{}, nil
	}
	if err != nil {
		return ratelimit.Counter{}, replyErr("GET counter", err)
	}
	f := strings.Fields(v)
	if len(f) != 3 {
		return ratelimit.Counter{}, fmt.Errorf("%w: counter %q is not \"start count previous\"", ErrBadReply, v)
	}
	var n [3]int64
	for i := range f {
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return ratelimit.Counter{}, fmt.Errorf("%w: counter %q is not \"start count previous\"", ErrBadReply, v)
		}
	}
	return ratelimit.Counter{Start: n[0], Cur: n[1], Prev: n[2]}, nil
}
