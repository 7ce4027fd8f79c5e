package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Window limits in synchronous mode. A window's count is a plain integer
// key per window, "<counter key>:<window start in Unix ms>", so a hit is
// one INCRBY and needs no script: a request whose limits are all windows
// sends, in one pipeline, per counter
//
//	INCRBY  <cur> <cost>       the count with this call
//	PEXPIRE <cur> <ttl>        until the end of the next window; once per
//	                           node and window
//	GET     <prev>             the previous window's count (sliding only,
//	                           until it is final: see below)
//
// and decides with storekit.Apply over the counts before its own hit. A
// call that is denied takes its cost back with DECRBY from every window
// that must not keep it (all of them, or with Penalty those after the
// first that denied). Redis runs each command alone, so each window's
// count is exact: a call is admitted only if its own INCRBY left the count
// within the limit, and a count that includes calls about to be taken
// back can only deny early, never admit beyond the limit. Concurrent
// decisions from many callers share a few connections through rueidis'
// automatic pipelining, so Redis does ~8k instructions per decision
// instead of a script's ~65k (docs/benchmarks.md).
//
// A sliding window's previous count is read with the window's first
// decisions; once the previous window can no longer change (prevGrace),
// a node that has read it keeps it for the rest of the window, so most
// decisions send one INCRBY and nothing else.
//
// The window start comes from the decision's time (the node's clock, or
// the caller's with CallerClock), as in Kong and in Envoy's ratelimit:
// nodes whose clocks differ by a few milliseconds put calls near an edge
// in neighbouring windows, and each window still admits at most its limit.
// Token buckets (and requests mixing a bucket with windows) are decided by
// take.lua on Redis' clock, over the same keys.

// allWindows reports whether every limit of r is a fixed or sliding window.
func allWindows(r *ratelimit.Request) bool {
	for i := range r.Limits {
		if r.Limits[i].Algorithm == ratelimit.TokenBucket {
			return false
		}
	}
	return true
}

// windowSlack is how much longer than its two windows a window key lives:
// nodes send PEXPIRE from their own clocks, and a node whose clock runs
// ahead must not expire a previous window that the others still read.
const windowSlack = time.Second

// takeIncr decides r, whose limits are all windows, with plain commands,
// in a batch with other concurrent decisions. Limits that share a counter
// (a fixed and a sliding limit of one window, as in Kong) share its keys
// and are counted once, as in every other store.
func (s *syncMode) takeIncr(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	var csBuf [4]storekit.Counter
	c, cs := s.prepIncr(r, csBuf[:0])
	res, answered := s.submit(ctx, c)
	return s.finishIncr(ctx, r, c, cs, res, answered)
}

// prepIncr returns the plain call of r and the starts of its windows,
// appended to cs.
func (s *syncMode) prepIncr(r *ratelimit.Request, cs []storekit.Counter) (*takeCall, []storekit.Counter) {
	nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
	minTTL := int64(0)
	if s.opts.CallerClock {
		minTTL = int64(callerClockTTL / time.Millisecond)
	}
	c := newCall()
	c.plain, c.cost, c.now = true, r.Cost, r.Now
	for i := range r.Limits {
		l := &r.Limits[i]
		w := int64(l.Window / time.Millisecond)
		start := nowMs - (nowMs%w+w)%w
		cs = append(cs, storekit.Counter{Start: start})
		u := sharedCounter(r.Limits[:i], storekit.CounterID(*l))
		sliding := l.Algorithm == ratelimit.SlidingWindow
		if u < 0 {
			u = len(c.ctrs)
			cur, prev := s.windowKeys(r.Key, storekit.CounterID(*l), start, w, sliding)
			c.ctrs = append(c.ctrs, plainCounter{cur: cur, prev: prev, ttl: max(start+2*w-nowMs+windowSlack.Milliseconds(), minTTL, 1)})
		} else {
			u = c.of[u]
			if pc := &c.ctrs[u]; sliding && pc.prev == "" {
				_, pc.prev = s.windowKeys(r.Key, storekit.CounterID(*l), start, w, true)
			}
		}
		c.of = append(c.of, u)
	}
	var knownBuf [4]bool
	known := append(knownBuf[:0], make([]bool, len(c.ctrs))...)
	s.local.lookup(r, c.of, cs, c.ctrs, known)
	for i := range r.Limits {
		u := c.of[i]
		pc := &c.ctrs[u]
		if pc.prev == "" {
			continue
		}
		if known[u] {
			pc.prev = "" // final, and this node has read it
		} else {
			w := int64(r.Limits[i].Window / time.Millisecond)
			pc.final = nowMs-cs[i].Start >= prevGrace(w)
		}
	}
	return c, cs
}

// finishIncr decides r from the answer to its plain call c.
func (s *syncMode) finishIncr(ctx context.Context, r *ratelimit.Request, c *takeCall, cs []storekit.Counter, res takeResult, answered bool) (ratelimit.Decision, error) {
	if !answered {
		if ctx.Err() != nil {
			// The batcher still runs c's INCRBYs: they must be taken
			// back, since no decision will.
			go s.abandon(c)
		}
		return ratelimit.Decision{}, res.err
	}
	var d ratelimit.Decision
	err := res.err
	if err == nil {
		d, err = s.decideIncr(ctx, r, c, cs, res.res)
	}
	free(c)
	return d, err
}

// sharedCounter returns the index in ls of the limit using counter id,
// or -1.
func sharedCounter(ls []ratelimit.Limit, id uint64) int {
	for j := range ls {
		if storekit.CounterID(ls[j]) == id {
			return j
		}
	}
	return -1
}

// abandon waits for the answer to c, whose caller gave up, and takes back
// the hits its INCRBYs added.
func (s *syncMode) abandon(c *takeCall) {
	var res takeResult
	select {
	case res = <-c.done:
	case <-s.stop:
		return
	}
	if res.err != nil {
		return
	}
	var takeBuf [4]bool
	take := takeBuf[:0]
	j := 0
	for u := range c.ctrs {
		_, err := res.res[j].AsInt64()
		take = append(take, err == nil)
		j += c.ctrs[u].cmds()
	}
	s.undo(context.Background(), c, take)
	free(c)
}

// decideIncr decides r from the results of c's commands. cs holds the
// window starts.
func (s *syncMode) decideIncr(ctx context.Context, r *ratelimit.Request, c *takeCall, cs []storekit.Counter, res []rueidis.RedisResult) (ratelimit.Decision, error) {
	// Read every reply; a counter whose INCRBY landed is remembered so
	// that a request that fails half way takes its hits back.
	var curBuf, prevBuf [4]int64
	var incrBuf, lateBuf [4]bool
	curs, prevs := curBuf[:0], prevBuf[:0]
	incremented, late := incrBuf[:0], lateBuf[:0]
	var failed error
	j := 0
	for u := range c.ctrs {
		pc := &c.ctrs[u]
		v, err := res[j].AsInt64()
		incremented = append(incremented, err == nil)
		if err != nil && failed == nil {
			failed = replyErr("INCRBY "+pc.cur, err)
		}
		// A count at most the cost was created by this INCRBY (or
		// recreated, after an eviction or a restart, possibly by a
		// DECRBY): a key this node thought had its expiry needs it now.
		late = append(late, err == nil && !pc.expire && v <= c.cost)
		// A count below zero (a take-back that landed after its key
		// vanished) counts as zero.
		curs = append(curs, max(v-c.cost, 0))
		j++
		if pc.expire {
			if err := res[j].Error(); err != nil && failed == nil {
				failed = replyErr("PEXPIRE "+pc.cur, err)
			}
			j++
		}
		p := pc.pv
		if pc.prev != "" {
			var err error
			if p, err = readCount(res[j], pc.prev); err != nil && failed == nil {
				failed = err
			}
			j++
		}
		prevs = append(prevs, max(p, 0))
	}
	if failed != nil {
		if !isUnavailable(failed) {
			s.undo(ctx, c, incremented)
		}
		return ratelimit.Decision{}, failed
	}
	s.expireLate(ctx, r, c, late)
	for i := range cs {
		cs[i].Cur, cs[i].Prev = curs[c.of[i]], prevs[c.of[i]]
	}
	d := storekit.Apply(r, cs)
	if !d.Allowed {
		// A counter shared by several limits keeps the cost when the last
		// of them counted it, as a store writing each limit's counter in
		// turn would.
		for i := range cs {
			incremented[c.of[i]] = !d.State(i).Counted
		}
		s.undo(ctx, c, incremented)
	}
	s.local.put(r, cs, c.of, c.ctrs)
	return d, nil
}

// readCount reads the reply of GET key: a count, 0 for a key Redis does
// not hold, or an error naming the key and quoting a value that is not an
// integer.
func readCount(r rueidis.RedisResult, key string) (int64, error) {
	n, err := r.AsInt64()
	if err == nil || rueidis.IsRedisNil(err) {
		return n, nil
	}
	if v, serr := r.ToString(); serr == nil {
		err = fmt.Errorf("%w: %s holds %q, not an integer count", ErrBadReply, key, v)
	}
	return 0, replyErr("GET "+key, err)
}

// flagged appends to dst the indexes of the set flags.
func flagged(dst []int, flags []bool) []int {
	for i, f := range flags {
		if f {
			dst = append(dst, i)
		}
	}
	return dst
}

// prevGrace returns how long after a window of w ms begins the count of
// the window before it is taken as final: a tenth of the window, at most
// a second. Past it only a node whose clock is that far behind could
// still count in the previous window (take-backs only lower it), so a
// node that has read the count then keeps it for the rest of the window
// instead of reading it on every decision.
func prevGrace(w int64) int64 {
	return min(w/10, time.Second.Milliseconds())
}

// expireLate gives the windows c.ctrs[u].cur with late[u] set their time to
// live, in one pipeline. A window whose PEXPIRE fails is forgotten as
// given one, so that the next decision sends it again.
func (s *syncMode) expireLate(ctx context.Context, r *ratelimit.Request, c *takeCall, late []bool) {
	var idxBuf [4]int
	idx := flagged(idxBuf[:0], late)
	if len(idx) == 0 {
		return
	}
	ctx, cancel := s.followUp(ctx)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.redisErrors.Add(1)
		return
	}
	res, trips := doMulti(ctx, rc, len(idx), func(j int) rueidis.Completed {
		pc := &c.ctrs[idx[j]]
		return rc.B().Pexpire().Key(pc.cur).Milliseconds(pc.ttl).Build()
	})
	s.redisCalls.Add(uint64(trips))
	for j, res := range res {
		if res.Error() != nil {
			s.redisErrors.Add(1)
			for i, u := range c.of {
				if u == idx[j] {
					c.ctrs[u].expire = false // put must not mark it
					s.local.unmarkExpired(r.Key, storekit.CounterID(r.Limits[i]))
				}
			}
		}
	}
}

// undo takes c's cost back from the windows c.ctrs[u].cur with take[u] set, in
// one pipeline, each with its PEXPIRE: should the key have vanished since
// the INCRBY, the DECRBY creates it again and it must still expire. A
// failure leaves those counts one call too high until their window ends,
// which can only deny early; it is counted, not returned.
func (s *syncMode) undo(ctx context.Context, c *takeCall, take []bool) {
	var idxBuf [4]int
	idx := flagged(idxBuf[:0], take)
	if len(idx) == 0 {
		return
	}
	ctx, cancel := s.followUp(ctx)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.redisErrors.Add(1)
		return
	}
	res, trips := doMulti(ctx, rc, 2*len(idx), func(j int) rueidis.Completed {
		pc := &c.ctrs[idx[j/2]]
		if j%2 == 0 {
			return rc.B().Decrby().Key(pc.cur).Decrement(c.cost).Build()
		}
		return rc.B().Pexpire().Key(pc.cur).Milliseconds(pc.ttl).Build()
	})
	s.redisCalls.Add(uint64(trips))
	for _, r := range res {
		if r.Error() != nil {
			s.redisErrors.Add(1)
		}
	}
}
