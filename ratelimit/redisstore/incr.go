package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
)

// Window limits in synchronous mode. A window's count is a plain integer
// key per window, "<counter key>:<window start in Unix ms>", so a hit is
// one INCRBY and needs no script: a request whose limits are all windows
// sends, in one pipeline, per limit
//
//	INCRBY  <cur> <cost>       the count with this call
//	PEXPIRE <cur> <ttl>        kept until the end of the next window
//	GET     <prev>             the previous window's count (sliding only)
//
// and decides with ratelimit.Apply over the counts before its own hit. A
// call that is denied takes its cost back with DECRBY from every window
// that must not keep it (all of them, or with Penalty those after the
// first that denied). Redis runs each command alone, so each window's
// count is exact: a call is admitted only if its own INCRBY left the count
// within the limit, and a count that includes calls about to be taken
// back can only deny early, never admit beyond the limit. Concurrent
// decisions from many callers share a few connections through rueidis'
// automatic pipelining, so Redis does ~10k instructions per decision
// instead of a script's ~60k (docs/benchmarks.md).
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

// windowKey returns the key of the window of counter key base that starts
// at startMs.
func windowKey(base string, startMs int64) string {
	var num [20]byte
	b := make([]byte, 0, len(base)+21)
	b = append(append(append(b, base...), ':'), strconv.AppendInt(num[:0], startMs, 10)...)
	return string(b)
}

// takeIncr decides r, whose limits are all windows, with plain commands,
// in a batch with other concurrent decisions.
func (s *Store) takeIncr(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
	minTTL := int64(0)
	if s.opts.CallerClock {
		minTTL = int64(callerClockTTL / time.Millisecond)
	}
	var csBuf [4]ratelimit.Counter
	cs := csBuf[:0]
	c := newCall()
	c.plain, c.cost, c.now = true, r.Cost, r.Now
	for i := range r.Limits {
		l := &r.Limits[i]
		w := int64(l.Window / time.Millisecond)
		start := nowMs - (nowMs%w+w)%w
		base := s.counterKey(r.Key, l.CounterID())
		cs = append(cs, ratelimit.Counter{Start: start})
		c.cur = append(c.cur, windowKey(base, start))
		c.ttl = append(c.ttl, max(start+2*w-nowMs, minTTL, 1))
		p := ""
		if l.Algorithm == ratelimit.SlidingWindow {
			p = windowKey(base, start-w)
		}
		c.prev = append(c.prev, p)
	}
	c.expire = append(c.expire[:0], make([]bool, len(cs))...)
	s.local.mustExpire(r, cs, c.expire)
	res, answered := s.submit(ctx, c)
	var d ratelimit.Decision
	err := res.err
	if err == nil {
		d, err = s.decideIncr(ctx, r, c, cs, res.res)
	}
	if answered {
		free(c)
	}
	return d, err
}

// decideIncr decides r from the results of c's commands: INCRBY, PEXPIRE
// and (sliding) GET per limit. cs holds the window starts.
func (s *Store) decideIncr(ctx context.Context, r *ratelimit.Request, c *takeCall, cs []ratelimit.Counter, res []rueidis.RedisResult) (ratelimit.Decision, error) {
	n := len(r.Limits)
	// Read every reply; a limit whose INCRBY landed is remembered so that
	// a request that fails half way takes its hits back.
	var incrBuf, lateBuf [4]bool
	incremented, late := incrBuf[:0], lateBuf[:0]
	var failed error
	j := 0
	for i := range n {
		v, err := res[j].AsInt64()
		incremented = append(incremented, err == nil)
		if err != nil && failed == nil {
			failed = replyErr("INCRBY "+c.cur[i], err)
		}
		cs[i].Cur = v - c.cost
		// A count equal to the cost was created by this INCRBY (or
		// recreated, after an eviction or a restart): a key this node
		// thought had its expiry needs it now.
		late = append(late, err == nil && !c.expire[i] && v == c.cost)
		j++
		if c.expire[i] {
			if err := res[j].Error(); err != nil && failed == nil {
				failed = replyErr("PEXPIRE "+c.cur[i], err)
			}
			j++
		}
		if c.prev[i] != "" {
			p, err := res[j].AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) && failed == nil {
				if v, serr := res[j].ToString(); serr == nil {
					err = fmt.Errorf("%w: %s holds %q, not an integer count", ErrBadReply, c.prev[i], v)
				}
				failed = replyErr("GET "+c.prev[i], err)
			}
			cs[i].Prev = p
			j++
		}
	}
	if failed != nil {
		if !isUnavailable(failed) {
			s.undo(ctx, c.cur, incremented, c.cost)
		}
		return ratelimit.Decision{}, failed
	}
	s.expireLate(ctx, c, late)
	d := ratelimit.Apply(r, cs)
	if !d.Allowed {
		for i := range n {
			incremented[i] = !d.State(i).Counted
		}
		s.undo(ctx, c.cur, incremented, c.cost)
	}
	s.local.put(r, cs, c.expire)
	return d, nil
}

// expireLate gives the windows c.cur[i] with late[i] set their time to
// live, in one pipeline.
func (s *Store) expireLate(ctx context.Context, c *takeCall, late []bool) {
	var idxBuf [4]int
	idx := idxBuf[:0]
	for i, l := range late {
		if l {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	res, trips := doMulti(ctx, s.rc, len(idx), func(j int) rueidis.Completed {
		return s.rc.B().Pexpire().Key(c.cur[idx[j]]).Milliseconds(c.ttl[idx[j]]).Build()
	})
	s.redisCalls.Add(uint64(trips))
	for _, r := range res {
		if r.Error() != nil {
			s.redisErrors.Add(1)
		}
	}
}

// undo takes cost back from the windows cur[i] with take[i] set, in one
// pipeline. A failure leaves those counts one call too high until their
// window ends, which can only deny early; it is counted, not returned.
func (s *Store) undo(ctx context.Context, cur []string, take []bool, cost int64) {
	var idxBuf [4]int
	idx := idxBuf[:0]
	for i, t := range take {
		if t {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	res, trips := doMulti(ctx, s.rc, len(idx), func(j int) rueidis.Completed {
		return s.rc.B().Decrby().Key(cur[idx[j]]).Decrement(cost).Build()
	})
	s.redisCalls.Add(uint64(trips))
	for _, r := range res {
		if r.Error() != nil {
			s.redisErrors.Add(1)
		}
	}
}
