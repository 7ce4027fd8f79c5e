package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// The periodic mode (SyncRate > 0, sluice's layout): decisions count on
// local counters, and a cycle every SyncRate pushes the hits counted since
// the last one and pulls the totals other nodes changed, learning which
// from the namespace's journal (see syncJournal).

// periodicMode is the mode of SyncRate > 0 in sluice's layout. Its goroutine
// is the loop that runs the cycles.
type periodicMode struct {
	*Store
	cycle cycle
	loop  *loop
}

// cycle is the periodic cycle's place in the namespace's journal,
// guarded by mu (which serializes cycles): the sequence number and epoch
// of its last journal call (cursor -1: none), whether the next cycle must
// read every counter, the local shard the sweep reads next and when, and
// pushes a failed journal call left to record.
type cycle struct {
	mu          sync.Mutex
	cursor      int64
	epoch       string
	readAll     bool
	sweep       int
	nextSweep   time.Time
	unjournaled []string
}

func newPeriodicMode(st *Store) *periodicMode {
	s := &periodicMode{Store: st}
	s.cycle.cursor = -1
	s.loop = st.every(st.opts.SyncRate, s.sync)
	return s
}

// take decides r on this node's counters. A counter the node does not
// hold yet is read from Redis first, in one round trip bounded by
// Options.Timeout, as a Kong node reads its namespace's counters before it
// decides: otherwise a key other nodes have counted would start from zero
// here and get its whole limit again on every node. If Redis does not
// answer, the counter starts from this node's hits, as in a fallback.
func (s *periodicMode) take(ctx context.Context, r ratelimit.Request, _ bool) (ratelimit.Decision, error) {
	return s.takeSeen(ctx, &r, s)
}

// fetch reads items, counters this node does not hold, into its local
// counters.
func (s *periodicMode) fetch(ctx context.Context, items []syncItem, now time.Time) error {
	var firstErr error
	s.push(ctx, items, s.nowArg(now), now.UnixMicro(), nil, func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	})
	return firstErr
}

// A fetcher reads counters a node does not hold from Redis into its local
// counters: the first sight of a key in a periodic mode.
type fetcher interface {
	fetch(ctx context.Context, items []syncItem, now time.Time) error
}

// takeSeen is the take of the periodic modes: r is decided on this node's
// counters, once f has read from Redis those it does not hold yet (see
// periodicMode.take), within Timeout. Without an answer the counters start
// from this node's hits; with Strict the call fails instead, with an error
// wrapping ErrUnavailable.
func (s *Store) takeSeen(ctx context.Context, r *ratelimit.Request, f fetcher) (ratelimit.Decision, error) {
	d, missing := s.local.takeHeld(r)
	if missing == nil {
		return d, nil
	}
	var err error
	if s.br.allow(r.Now) {
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		err = f.fetch(cctx, missing, r.Now)
		cancel()
		s.record(ctx, r.Now, err)
	} else {
		err = ErrUnavailable
	}
	if err != nil && s.opts.Strict {
		if isUnavailable(err) && !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return ratelimit.Decision{}, callerErr(ctx, err)
	}
	return s.local.take(r, true), nil
}

// read reads this node's counters: the totals of the last cycle plus the
// hits counted since.
func (s *periodicMode) read(_ context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	return s.local.counters(r), r.Now, nil
}

// reset deletes r's counters in Redis; other nodes re-read them when
// the journal says they changed.
func (s *periodicMode) reset(ctx context.Context, r *ratelimit.Request) error {
	err := s.del(ctx, r.Now, func(rc rueidis.Client) (rueidis.Commands, error) {
		return delKeys(rc, s.resetKeys(r)), nil
	})
	if err != nil {
		return err
	}
	s.cycle.mu.Lock()
	for _, l := range r.Limits {
		if len(s.cycle.unjournaled) < maxUnjournaled {
			s.cycle.unjournaled = append(s.cycle.unjournaled, journalMember(r.Key, storekit.CounterID(l)))
		}
	}
	s.cycle.mu.Unlock()
	return nil
}

func (s *periodicMode) sync(ctx context.Context, now time.Time) error {
	s.cycle.mu.Lock()
	defer s.cycle.mu.Unlock()
	if !s.br.allow(now) {
		s.local.sweep(now)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.cycleTimeout())
	defer cancel()
	if err := s.syncJournal(cctx, now); err != nil {
		s.unavailable(ctx, now, err)
		return err
	}
	s.br.success()
	s.synced(now)
	return nil
}

func (s *periodicMode) close() { s.loop.close() }

// sweepDue returns the counters of the local shards the sweep has due at
// now, one shard per step since the last cycle (so that a SyncRate longer
// than a step still reads every counter within sweepEvery), and which
// shards those are.
func (s *periodicMode) sweepDue(now time.Time, step time.Duration) (items []syncItem, swept [localShards]bool) {
	for n := 0; !now.Before(s.cycle.nextSweep) && n < len(swept); n++ {
		swept[s.cycle.sweep] = true
		items = append(items, s.local.liveShard(now, s.cycle.sweep)...)
		s.cycle.sweep = (s.cycle.sweep + 1) % len(swept)
		s.cycle.nextSweep = s.cycle.nextSweep.Add(step)
	}
	if !now.Before(s.cycle.nextSweep) {
		s.cycle.nextSweep = now.Add(step) // a whole sweep was due: it was done
	}
	return items, swept
}

// clearFinal makes a push of items read the previous window of each
// sliding counter, whether or not the node holds it final.
func clearFinal(items []syncItem) {
	for i := range items {
		items[i].final = 0
	}
}

// syncJournal runs one cycle in sluice's layout, in up to three round
// trips:
//  1. push the counters used since the previous cycle (sync.lua, which
//     returns their totals);
//  2. record them in the namespace's journal and learn from it which
//     counters other nodes pushed since this node's previous cycle
//     (journal.lua);
//  3. read those of them this node holds (push with nothing to push).
//
// Kong's cycle reads every counter of the namespace; reading
// only the counters that changed in Redis gives each node the same totals
// for a fraction of the work when most counters are idle. Whenever the
// journal cannot vouch for what changed (first cycle, a failed cycle, the
// journal lost or trimmed past this node's cursor), the cycle reads every
// counter this node holds, as Kong's does; and a sweep reads them all
// within every sweepEvery regardless, a shard of them every
// sweepEvery/len(shards).
func (s *periodicMode) syncJournal(ctx context.Context, now time.Time) error {
	items := s.local.takeDirty()
	if len(items) == 0 && len(s.cycle.unjournaled) == 0 && s.local.size() == 0 {
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
	members := s.cycle.unjournaled
	s.cycle.unjournaled = nil
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
			s.cycle.unjournaled = members
		}
		s.cycle.cursor = -1
		fail(err)
		return firstErr
	}
	var pull []syncItem
	step := sweepEvery / time.Duration(len(s.local.shards))
	// A pull reads both windows of a sliding counter, even one whose
	// previous count this node holds final, when the counter may have
	// changed behind its back: another node may have pushed into the
	// previous window late (after a fallback, or a slow cycle). The sweep,
	// a safety net for pushes never journaled, reads a final previous
	// count only with a journaled change.
	if full || s.cycle.readAll {
		pull = s.local.live(now)
		clearFinal(pull)
		s.cycle.readAll = false
		s.cycle.nextSweep = now.Add(step) // every counter is fresh
	} else {
		sweep, swept := s.sweepDue(now, step)
		var changedSwept map[lkey]bool
		for _, m := range changed {
			k, ok := parseJournalMember(m)
			if !ok {
				fail(fmt.Errorf("%w: journal member %q is not \"id:key\"", ErrBadReply, m))
				continue
			}
			if swept[s.local.shardIndex(k.key)] {
				if changedSwept == nil {
					changedSwept = map[lkey]bool{}
				}
				changedSwept[k] = true // read with its shard
				continue
			}
			if it, ok := s.local.holds(k); ok {
				pull = append(pull, it)
			}
		}
		clearFinal(pull)
		// A counter this cycle pushed was read by its push: the sweep
		// reads it again only when the journal says another node changed
		// it since.
		var pushed map[lkey]bool
		if len(sweep) > 0 && len(items) > 0 {
			pushed = make(map[lkey]bool, len(items))
			for i := range items {
				pushed[lkey{items[i].key, items[i].id}] = true
			}
		}
		for i := range sweep {
			k := lkey{sweep[i].key, sweep[i].id}
			switch {
			case changedSwept[k]:
				sweep[i].final = 0
			case pushed[k]:
				continue
			}
			pull = append(pull, sweep[i])
		}
	}
	if len(pull) > 0 {
		s.push(ctx, pull, nowArg, nowUs, nil, fail)
	}
	if firstErr != nil {
		// A push or read that failed may have left this node behind on
		// counters its cursor has passed: the next cycle reads them all.
		s.cycle.readAll = true
	}
	return firstErr
}

// maxPushBatch is how many counters one sync.lua call pushes: enough to
// spread the script's own cost, few enough that one call holds Redis for
// a few milliseconds at most.
const maxPushBatch = 256

// push sends items' waiting hits and reads their totals, all in one
// pipeline, and merges the totals into the local counters. Window counters
// go as plain commands (an INCRBY per window with hits, a GET per count no
// INCRBY returned; see incr.go for the layout), token buckets through
// sync.lua, several per call (on Cluster, of one slot). With members
// non-nil it appends the journal member of every counter that had hits to
// push; items with no hits are only read. A counter that fails is reported
// to fail; the others are merged.
func (s *periodicMode) push(ctx context.Context, items []syncItem, nowArg string, nowUs int64, members []string, fail func(error)) []string {
	rc, err := s.c.conn(ctx)
	if err != nil {
		fail(err)
		return members
	}
	var buckets []int
	var wins []winPush
	nowMs := floorDiv(nowUs, 1000)
	minTTL := int64(0)
	if s.opts.CallerClock {
		minTTL = int64(callerClockTTL / time.Millisecond)
	}
	for k := range items {
		if items[k].lim.Algorithm == ratelimit.TokenBucket {
			buckets = append(buckets, k)
		} else {
			wins = append(wins, s.planPush(k, &items[k], nowMs, minTTL))
		}
	}
	calls, groups := s.bucketCalls(items, buckets, nowArg)
	var ops []winOp
	for wi := range wins {
		ops = wins[wi].appendOps(ops, wi)
	}
	res, trips := doMulti(ctx, rc, len(calls)+len(ops), func(j int) rueidis.Completed {
		if j < len(calls) {
			return syncScript.evalsha(rc, calls[j].keys, calls[j].args)
		}
		op := ops[j-len(calls)]
		w := &wins[op.w]
		switch op.k {
		case opIncr:
			return rc.B().Incrby().Key(w.hits[op.h].key).Increment(w.hits[op.h].d).Build()
		case opExpire:
			return rc.B().Pexpire().Key(w.hits[op.h].key).Milliseconds(w.hits[op.h].ttl).Build()
		case opGetCur:
			return rc.B().Get().Key(w.cur).Build()
		default:
			return rc.B().Get().Key(w.prev).Build()
		}
	})
	trips += syncScript.rerunNoScript(ctx, rc, calls, res[:len(calls)])
	s.redisCalls.Add(uint64(trips))

	for ci, r := range res[:len(calls)] {
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
			s.local.merge(&items[k], storekit.Counter{Start: n[0], Cur: n[1], Prev: n[2]}, nowUs, 0)
		}
	}
	s.mergeWindows(ctx, rc, items, wins, res[len(calls):], nowUs, fail)
	if members != nil {
		// Every counter with hits, merged or not: a push that failed may
		// have reached Redis, and others then read it once more for
		// nothing at worst.
		for k := range items {
			if items[k].p != ([2]pend{}) {
				members = append(members, journalMember(items[k].key, items[k].id))
			}
		}
	}
	return members
}

// bucketCalls groups the token buckets items[k], k in buckets, into
// sync.lua calls of at most maxPushBatch counters of one slot.
func (s *periodicMode) bucketCalls(items []syncItem, buckets []int, nowArg string) ([]call, [][]int) {
	keys := make(map[int]string, len(buckets))
	for _, k := range buckets {
		keys[k] = s.counterKey(items[k].key, items[k].id)
	}
	if s.cluster {
		sort.SliceStable(buckets, func(a, b int) bool { return slot(keys[buckets[a]]) < slot(keys[buckets[b]]) })
	}
	var calls []call
	var groups [][]int
	for i := 0; i < len(buckets); {
		j := i + 1
		for j < len(buckets) && j-i < maxPushBatch && (!s.cluster || slot(keys[buckets[j]]) == slot(keys[buckets[i]])) {
			j++
		}
		g := buckets[i:j]
		c := call{keys: make([]string, 0, len(g)), args: make([]string, 0, 2+len(g))}
		c.args = append(c.args, nowArg, s.minTTL())
		for _, k := range g {
			it := &items[k]
			c.keys = append(c.keys, keys[k])
			c.args = append(c.args, itoa(it.p[0].d))
		}
		calls = append(calls, c)
		groups = append(groups, g)
		i = j
	}
	return calls, groups
}

// winPush is the plain commands of one window counter of a cycle: an
// INCRBY (and, once per window and node, a PEXPIRE) per window with hits,
// then a GET of the current and the previous window's counts that no INCRBY
// returned.
type winPush struct {
	k         int   // index in items
	s, w      int64 // the window reported (the newest of now's and those pushed) and W
	cur, prev string
	hits      [2]winHits
	nh        int
	getCur    bool
	getPrev   bool
	// knownPrev is set when the node holds the previous window's final
	// count (prevVal) and sends no GET for it.
	knownPrev bool
	prevVal   int64
}

type winHits struct {
	key      string
	start, d int64
	ttl      int64
	expire   bool
}

type winOpKind uint8

const (
	opIncr winOpKind = iota
	opExpire
	opGetCur
	opGetPrev
)

// winOp is one command of a cycle's pipeline: op k of hits h of wins[w].
type winOp struct {
	w, h int
	k    winOpKind
}

// planPush plans the commands of window counter it. The window read is
// the newest of the node's last decision's, the hits' and, on the node's
// clock, the cycle's (with CallerClock the cycle's time need not be on the
// callers' timeline). Hits of a window older than the one before it are
// dropped: they can no longer affect a decision.
func (s *periodicMode) planPush(k int, it *syncItem, nowMs, minTTL int64) winPush {
	w := int64(it.lim.Window / time.Millisecond)
	wp := winPush{k: k, w: w, s: it.start}
	if !s.opts.CallerClock || wp.s == 0 {
		wp.s = max(wp.s, nowMs-(nowMs%w+w)%w)
	}
	for _, p := range it.p {
		if p.d != 0 {
			wp.s = max(wp.s, p.start)
		}
	}
	wp.cur, wp.prev = s.windowKeys(it.key, it.id, wp.s, w, true)
	for _, p := range it.p {
		if p.d == 0 || p.start < wp.s-w {
			continue
		}
		key := wp.cur
		if p.start != wp.s {
			key = wp.prev
		}
		wp.hits[wp.nh] = winHits{key: key, start: p.start, d: p.d, ttl: max(p.start+2*w-nowMs+windowSlack.Milliseconds(), minTTL, 1), expire: it.expires != p.start}
		wp.nh++
	}
	wp.getCur = true
	wp.getPrev = it.lim.Algorithm == ratelimit.SlidingWindow
	if wp.getPrev && it.final == wp.s {
		wp.getPrev, wp.knownPrev, wp.prevVal = false, true, it.prev
	}
	for _, h := range wp.hits[:wp.nh] {
		switch h.start {
		case wp.s:
			wp.getCur = false
		case wp.s - w:
			wp.getPrev = false
		}
	}
	return wp
}

func (wp *winPush) appendOps(ops []winOp, wi int) []winOp {
	for h := range wp.hits[:wp.nh] {
		ops = append(ops, winOp{wi, h, opIncr})
		if wp.hits[h].expire {
			ops = append(ops, winOp{wi, h, opExpire})
		}
	}
	if wp.getCur {
		ops = append(ops, winOp{wi, 0, opGetCur})
	}
	if wp.getPrev {
		ops = append(ops, winOp{wi, 0, opGetPrev})
	}
	return ops
}

// read reads the results of wp's commands, in the order appendOps sends
// them, from the start of res: the totals of the current and previous
// windows, which hits' INCRBYs landed (to take them back should another
// command fail), and the number of results read. Every INCRBY is read
// after an error; the other commands are not.
func (wp *winPush) read(res []rueidis.RedisResult) (cur, prev int64, incred [2]bool, n int, err error) {
	prev = wp.prevVal // a GET or an INCRBY of the previous window replaces it
	for h := range wp.hits[:wp.nh] {
		hit := &wp.hits[h]
		v, ierr := res[n].AsInt64()
		n++
		switch {
		case ierr != nil:
			if err == nil {
				err = replyErr("INCRBY "+hit.key, ierr)
			}
		case hit.start == wp.s:
			incred[h], cur = true, v
		case hit.start == wp.s-wp.w:
			incred[h], prev = true, v
		default:
			incred[h] = true
		}
		if hit.expire {
			if perr := res[n].Error(); perr != nil && err == nil {
				err = replyErr("PEXPIRE "+hit.key, perr)
			}
			n++
		}
	}
	if wp.getCur {
		if v, gerr := readCount(res[n], wp.cur); err == nil {
			cur, err = v, gerr
		}
		n++
	}
	if wp.getPrev {
		if v, gerr := readCount(res[n], wp.prev); err == nil {
			prev, err = v, gerr
		}
		n++
	}
	return cur, prev, incred, n, err
}

// mergeWindows merges each window counter's totals from res, the results
// of the commands of wins in order, in one pass; then it sends in one
// pipeline what some counters need: a counter whose command failed takes
// back the hits its INCRBYs added, and a window an INCRBY created (or
// recreated) after this node had given it its expiry gets its time to
// live.
func (s *periodicMode) mergeWindows(ctx context.Context, rc rueidis.Client, items []syncItem, wins []winPush, res []rueidis.RedisResult, nowUs int64, fail func(error)) {
	var fix []rueidis.Completed
	var lateOf []int // per command of fix: the item of a late PEXPIRE, or -1
	for wi := range wins {
		wp := &wins[wi]
		it := &items[wp.k]
		oc, op, incred, n, err := wp.read(res)
		res = res[n:]
		if err != nil {
			fail(err)
			for h := range wp.hits[:wp.nh] {
				if incred[h] && !isUnavailable(err) {
					hit := &wp.hits[h]
					fix = append(fix, rc.B().Decrby().Key(hit.key).Decrement(hit.d).Build(),
						rc.B().Pexpire().Key(hit.key).Milliseconds(hit.ttl).Build())
					lateOf = append(lateOf, -1, -1)
				}
			}
			continue
		}
		var expired int64
		for _, hit := range wp.hits[:wp.nh] {
			if hit.expire {
				expired = max(expired, hit.start)
			} else if (hit.start == wp.s && oc <= hit.d) || (hit.start == wp.s-wp.w && op <= hit.d) {
				// Created (or recreated) by this INCRBY after this node
				// had given the window its expiry.
				fix = append(fix, rc.B().Pexpire().Key(hit.key).Milliseconds(hit.ttl).Build())
				lateOf = append(lateOf, wp.k)
			}
		}
		// A count below zero (a take-back that landed after its key
		// vanished) counts as zero.
		c, p := max(oc, 0), max(op, 0)
		var final int64
		switch {
		case it.lim.Algorithm == ratelimit.FixedWindow:
			p = 0 // and the counter does not hold the previous count
		case wp.knownPrev:
			final = wp.s
		case wp.getPrev && nowUs/1000-wp.s >= prevGrace(wp.w)+s.opts.SyncRate.Milliseconds():
			// Read once final: past the grace for clocks, and past the
			// cycle in which other nodes push what they counted before
			// the edge.
			final = wp.s
		}
		s.local.merge(it, storekit.Counter{Start: wp.s, Cur: c, Prev: p}, nowUs, final)
		if expired != 0 {
			s.local.markExpired(it.key, it.id, expired)
		}
	}
	if len(fix) > 0 {
		for j, r := range rc.DoMulti(ctx, fix...) {
			if r.Error() != nil {
				s.redisErrors.Add(1)
				if k := lateOf[j]; k >= 0 {
					// The next push sends the expiry again.
					s.local.unmarkExpired(items[k].key, items[k].id)
				}
			}
		}
		s.redisCalls.Add(1)
	}
}

// sweepEvery is how often a periodic node reads every counter it holds,
// whatever the journal says, a shard at a time: it bounds how long a
// counter can stay stale if a push was never journaled (a node died
// between the two, an error of at most one cycle of that node's hits). A
// failover that loses journal writes is detected by the journal itself,
// and a failed cycle reads every counter at once. Spreading the sweep
// keeps its cost (a GET per counter) flat: an idle node holding 100k
// counters reads ~1.7k a second.
const sweepEvery = time.Minute

// journalRetention is how long the journal keeps an entry, at least: a
// node whose cursor is older reads every counter it holds.
const journalRetention = 10 * time.Second

// maxUnjournaled bounds the pushes a node keeps to journal again after a
// failed journal call; beyond it they are dropped and others learn of them
// by their next full read.
const maxUnjournaled = 1 << 16

// journal records members (counters pushed since the previous call) and
// returns either full (read every counter) or the counters others pushed
// since this node's previous call.
func (s *periodicMode) journal(ctx context.Context, now time.Time, nowArg string, members []string) (full bool, changed []string, err error) {
	rc, err := s.c.conn(ctx)
	if err != nil {
		return false, nil, err
	}
	keys := []string{s.tag + "}:journal:log", s.tag + "}:journal:seq", s.tag + "}:journal:marks"}
	retention := strconv.FormatInt(int64(max(journalRetention, 50*s.opts.SyncRate)/time.Millisecond), 10)
	args := []string{nowArg, strconv.FormatInt(s.cycle.cursor, 10), s.cycle.epoch, retention, encodeMembers(members)}
	res, trips := journalScript.execMulti(ctx, rc, []call{{keys: keys, args: args}})
	s.redisCalls.Add(uint64(trips))
	vals, err := res[0].ToArray()
	if err != nil {
		return false, nil, replyErr("journal.lua", err)
	}
	if len(vals) < 3 {
		return false, nil, fmt.Errorf("%w: journal.lua returned %d values, want at least 3", ErrBadReply, len(vals))
	}
	seq, err := vals[0].AsInt64()
	if err != nil {
		return false, nil, fmt.Errorf("%w: journal.lua sequence: %w", ErrBadReply, err)
	}
	epoch, err := vals[1].ToString()
	if err != nil {
		return false, nil, fmt.Errorf("%w: journal.lua epoch: %w", ErrBadReply, err)
	}
	f, err := vals[2].AsInt64()
	if err != nil {
		return false, nil, fmt.Errorf("%w: journal.lua flag: %w", ErrBadReply, err)
	}
	// Counters several calls recorded are read once.
	seen := make(map[string]bool)
	for _, v := range vals[3:] {
		e, err := v.ToString()
		if err == nil {
			err = decodeMembers(e, func(m string) {
				if !seen[m] {
					seen[m] = true
					changed = append(changed, m)
				}
			})
		}
		if err != nil {
			return false, nil, fmt.Errorf("%w: journal.lua entry: %w", ErrBadReply, err)
		}
	}
	s.cycle.cursor, s.cycle.epoch = seq, epoch
	return f == 1, changed, nil
}

// encodeMembers joins journal members into one log entry: each as its
// length in decimal, a colon and its bytes, so that any bytes a key holds
// survive.
func encodeMembers(members []string) string {
	n := 0
	for _, m := range members {
		n += len(m) + 8
	}
	b := make([]byte, 0, n)
	for _, m := range members {
		b = append(append(strconv.AppendInt(b, int64(len(m)), 10), ':'), m...)
	}
	return string(b)
}

// decodeMembers calls f with every member of a log entry encodeMembers
// made.
func decodeMembers(e string, f func(string)) error {
	for len(e) > 0 {
		i := strings.IndexByte(e, ':')
		if i <= 0 {
			return fmt.Errorf("entry %.40q is not a run of <length>:<member>", e)
		}
		n, err := strconv.Atoi(e[:i])
		if err != nil || n < 0 || n > len(e)-i-1 {
			return fmt.Errorf("entry %.40q is not a run of <length>:<member>", e)
		}
		f(e[i+1 : i+1+n])
		e = e[i+1+n:]
	}
	return nil
}

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
