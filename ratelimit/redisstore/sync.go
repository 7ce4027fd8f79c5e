package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

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
		sh.liveCounters(ns, func(k lkey, e *entry) {
			out = append(out, syncItem{key: k.key, id: k.id, lim: e.lim, p: e.pend})
			e.pend, e.dirty = [2]pend{}, false
		})
		clear(sh.dirty)
		sh.dirty = sh.dirty[:0]
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
				out = append(out, syncItem{key: k.key, id: k.id, lim: e.lim, p: e.pend})
				e.pend, e.dirty = [2]pend{}, false
			}
		}
		clear(sh.dirty)
		sh.dirty = sh.dirty[:0]
		sh.mu.Unlock()
	}
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
			out = append(out, syncItem{key: k.key, id: k.id, lim: e.lim})
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
	return syncItem{key: k.key, id: k.id, lim: e.lim}, true
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
// counted since the last cycle and pulls the totals of the counters other
// nodes changed (see syncJournal; in Kong's layout, of every counter); in
// every mode it drops local counters that expired. The store runs it every
// SyncRate unless ManualSync is set.
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
	ctx, cancel := context.WithTimeout(ctx, s.cycleTimeout())
	defer cancel()
	if s.opts.KongLayout {
		items := s.local.snapshot(now)
		if len(items) > 0 {
			if err := s.syncKong(ctx, now, items); err != nil {
				s.record(now, err)
				return err
			}
		}
		s.br.success()
		s.syncs.Add(1)
		return nil
	}
	if err := s.syncJournal(ctx, now); err != nil {
		s.unavailable(now, err)
		return err
	}
	s.br.success()
	s.syncs.Add(1)
	return nil
}

// syncJournal runs one cycle in sluice's layout, in up to three round
// trips:
//  1. push the counters used since the previous cycle (sync.lua, which
//     returns their totals);
//  2. record them in the namespace's journal and learn from it which
//     counters other nodes pushed since this node's previous cycle
//     (journal.lua);
//  3. read those of them this node holds (sync.lua with nothing to push).
//
// Kong's cycle reads every counter of the namespace (spec §2.7); reading
// only the counters that changed in Redis gives each node the same totals
// for a fraction of the work when most counters are idle. Every
// fullPullEvery, and whenever the journal cannot vouch for what changed
// (first cycle, a failed cycle, the journal lost or trimmed past this
// node's cursor), the cycle reads every counter this node holds, as
// Kong's does.
func (s *Store) syncJournal(ctx context.Context, now time.Time) error {
	items := s.local.takeDirty()
	if len(items) == 0 && len(s.unjournaled) == 0 && s.local.size() == 0 {
		return nil // nothing to push, nothing to refresh
	}
	nowArg := s.nowArg(now)
	nowUs := now.UnixMicro()
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	members := s.unjournaled
	s.unjournaled = nil
	if len(items) > 0 {
		if members == nil {
			members = make([]string, 0, len(items))
		}
		members = s.push(ctx, items, nowArg, nowUs, members, fail)
	}

	full, changed, err := s.journal(ctx, now, nowArg, members)
	if err != nil {
		// Others learn of these pushes from the next cycle's journal call.
		if len(members) <= maxUnjournaled {
			s.unjournaled = members
		}
		s.cursor = -1
		fail(err)
		return firstErr
	}
	var pull []syncItem
	if full || now.Sub(s.lastFull) >= fullPullEvery {
		pull = s.local.live(now)
		s.lastFull = now
	} else {
		for _, m := range changed {
			k, ok := parseJournalMember(m)
			if !ok {
				fail(fmt.Errorf("%w: journal member %q is not \"id:key\"", ErrBadReply, m))
				continue
			}
			if it, ok := s.local.holds(k); ok {
				pull = append(pull, it)
			}
		}
	}
	if len(pull) > 0 {
		s.push(ctx, pull, nowArg, nowUs, nil, fail)
	}
	return firstErr
}

// maxPushBatch is how many counters one sync.lua call pushes: enough to
// spread the script's own cost, few enough that one call holds Redis for
// a few milliseconds at most.
const maxPushBatch = 256

// push sends items' waiting hits with sync.lua, several counters per call
// (on Cluster, of one slot), all calls in one pipeline, and merges the
// totals Redis returns. With members non-nil it appends the journal member
// of every counter that had hits to push; items with no hits are only
// read. A counter that fails is reported to fail; the others are merged.
func (s *Store) push(ctx context.Context, items []syncItem, nowArg string, nowUs int64, members []string, fail func(error)) []string {
	keys := make([]string, len(items))
	order := make([]int, len(items))
	for i := range items {
		keys[i] = s.counterKey(items[i].key, items[i].id)
		order[i] = i
	}
	var slots []uint16
	if s.cluster {
		slots = make([]uint16, len(items))
		for i := range keys {
			slots[i] = slot(keys[i])
		}
		sort.SliceStable(order, func(a, b int) bool { return slots[order[a]] < slots[order[b]] })
	}
	// groups[g] holds the indexes (into items) of call g's counters.
	var calls []call
	var groups [][]int
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && j-i < maxPushBatch && (slots == nil || slots[order[j]] == slots[order[i]]) {
			j++
		}
		g := order[i:j]
		c := call{keys: make([]string, 0, len(g)), args: make([]string, 0, 2+6*len(g))}
		c.args = append(c.args, nowArg, s.minTTL())
		for _, k := range g {
			it := &items[k]
			kind, w := int64(2), int64(0)
			switch it.lim.Algorithm {
			case ratelimit.FixedWindow:
				kind, w = 0, int64(it.lim.Window/time.Millisecond)
			case ratelimit.SlidingWindow:
				kind, w = 1, int64(it.lim.Window/time.Millisecond)
			}
			c.keys = append(c.keys, keys[k])
			c.args = append(c.args, itoa(kind), itoa(w), itoa(it.p[0].start), itoa(it.p[0].d), itoa(it.p[1].start), itoa(it.p[1].d))
		}
		calls = append(calls, c)
		groups = append(groups, g)
		i = j
	}
	res, trips := syncScript.execMulti(ctx, s.rc, calls)
	s.redisCalls.Add(uint64(trips))
	for ci, r := range res {
		g := groups[ci]
		vals, err := r.ToArray()
		if err != nil {
			err = replyErr("sync.lua", err)
		} else if len(vals) != 3*len(g) {
			err = fmt.Errorf("%w: sync.lua returned %d values for %d counters, want %d", ErrBadReply, len(vals), len(g), 3*len(g))
		}
		if err != nil {
			fail(err)
			continue
		}
		for x, k := range g {
			v := vals[3*x : 3*x+3]
			if v[0].IsString() {
				msg, _ := v[0].ToString()
				fail(fmt.Errorf("%w: sync.lua: %s", ErrBadReply, msg))
				continue
			}
			var buf [3]int64
			n, err := appendInt64s(buf[:0], v)
			if err != nil {
				fail(fmt.Errorf("%w: sync.lua: %w", ErrBadReply, err))
				continue
			}
			s.local.merge(&items[k], ratelimit.Counter{Start: n[0], Cur: n[1], Prev: n[2]}, nowUs)
			if members != nil {
				members = append(members, journalMember(items[k].key, items[k].id))
			}
		}
	}
	return members
}

// fullPullEvery is how often a periodic cycle reads every counter the node
// holds, whatever the journal says: it bounds how long a counter can stay
// stale if a push was never journaled (a node died between the two) or the
// journal lost writes in a failover.
const fullPullEvery = 10 * time.Second

// maxUnjournaled bounds the pushes a node keeps to journal again after a
// failed journal call; beyond it they are dropped and others learn of them
// by their next full read.
const maxUnjournaled = 1 << 16

// maxJournalArgs is how many members one journal.lua call records; more
// are split over several calls in one pipeline.
const maxJournalArgs = 4096

// journal records members (counters pushed since the previous call) and
// returns either full (read every counter) or the counters others pushed
// since this node's previous call.
func (s *Store) journal(ctx context.Context, now time.Time, nowArg string, members []string) (full bool, changed []string, err error) {
	keys := []string{s.tag + "}:journal", s.tag + "}:journal:seq", s.tag + "}:journal:marks"}
	retention := strconv.FormatInt(int64(max(fullPullEvery, 50*s.opts.SyncRate)/time.Millisecond), 10)
	head := []string{nowArg, strconv.FormatInt(s.cursor, 10), s.epoch, retention}
	n := max(1, (len(members)+maxJournalArgs-1)/maxJournalArgs)
	calls := make([]call, n)
	for i := range calls {
		chunk := members[min(i*maxJournalArgs, len(members)):min((i+1)*maxJournalArgs, len(members))]
		calls[i] = call{keys: keys, args: append(append(make([]string, 0, len(head)+len(chunk)), head...), chunk...)}
	}
	res, trips := journalScript.execMulti(ctx, s.rc, calls)
	s.redisCalls.Add(uint64(trips))
	var seq int64
	var epoch string
	for _, r := range res {
		vals, err := r.ToArray()
		if err != nil {
			return false, nil, replyErr("journal.lua", err)
		}
		if len(vals) < 3 {
			return false, nil, fmt.Errorf("%w: journal.lua returned %d values, want at least 3", ErrBadReply, len(vals))
		}
		if seq, err = vals[0].AsInt64(); err != nil {
			return false, nil, fmt.Errorf("%w: journal.lua sequence: %w", ErrBadReply, err)
		}
		if epoch, err = vals[1].ToString(); err != nil {
			return false, nil, fmt.Errorf("%w: journal.lua epoch: %w", ErrBadReply, err)
		}
		f, err := vals[2].AsInt64()
		if err != nil {
			return false, nil, fmt.Errorf("%w: journal.lua flag: %w", ErrBadReply, err)
		}
		full = full || f == 1
		for _, v := range vals[3:] {
			m, err := v.ToString()
			if err != nil {
				return false, nil, fmt.Errorf("%w: journal.lua member: %w", ErrBadReply, err)
			}
			changed = append(changed, m)
		}
	}
	s.cursor, s.epoch = seq, epoch
	return full, changed, nil
}

// journalMember names a counter in the journal: its limit's counter id and
// its key.
func journalMember(key string, id uint64) string {
	return strconv.FormatUint(id, 10) + ":" + key
}

func parseJournalMember(m string) (lkey, bool) {
	i := strings.IndexByte(m, ':')
	if i <= 0 {
		return lkey{}, false
	}
	id, err := strconv.ParseUint(m[:i], 10, 64)
	if err != nil {
		return lkey{}, false
	}
	return lkey{key: m[i+1:], id: id}, true
}
