package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Kong's layout (docs/redis.md, "Kong interop"), used with Options.KongLayout: one hash per
// window and namespace, "<window_start>:<W>:<namespace>" (seconds), whose
// field is the counter key and whose value is the window's count. Kong
// nodes and sluice nodes sharing one Redis then share their counters.
//
// Kong updates these hashes with plain commands (HINCRBY, EXPIRE, HGET),
// not scripts, and so does the store in this layout: every window count is
// exact (HINCRBY is atomic), but a decision over several windows is not
// one atomic step, and a denied call that must not count is taken back
// with a second HINCRBY. Concurrent callers may then see a count that
// includes a call about to be taken back: they can be denied early, never
// admitted beyond the limit of a fixed window. The window start comes from
// the node's clock, as in Kong.

// kongMode is the mode of Options.KongLayout, synchronous (SyncRate 0:
// every decision in Redis, takeKong) or periodic (SyncRate > 0: local
// counts, and a cycle that pushes them and reads back every counter,
// syncKong). Its goroutine is the loop that runs the cycles, or drops
// expired local counters.
type kongMode struct {
	*Store
	mu   sync.Mutex // serializes cycles
	loop *loop
}

func newKongMode(st *Store) *kongMode {
	s := &kongMode{Store: st}
	if st.opts.SyncRate > 0 {
		s.loop = st.every(st.opts.SyncRate, s.sync)
	} else {
		s.loop = st.every(sweepInterval, st.sweep)
	}
	return s
}

func (s *kongMode) take(ctx context.Context, rv ratelimit.Request, _ bool) (ratelimit.Decision, error) {
	r := &rv
	if err := checkKong(r.Limits); err != nil {
		return ratelimit.Decision{}, err
	}
	if s.opts.SyncRate > 0 {
		return s.takeSeen(ctx, r, s)
	}
	if !s.br.allow(r.Now) {
		return s.refused(r)
	}
	d, err := s.takeKong(ctx, r)
	if err != nil {
		return s.failed(ctx, r, err)
	}
	return d, nil
}

// fetch reads items, counters this node does not hold, into its local
// counters (see Store.takeSeen).
func (s *kongMode) fetch(ctx context.Context, items []syncItem, now time.Time) error {
	lims := make([]ratelimit.Limit, len(items))
	for i := range items {
		lims[i] = items[i].lim
	}
	cs, err := s.readKong(ctx, &ratelimit.Request{Key: items[0].key, Limits: lims, Now: now})
	if err != nil {
		return err
	}
	nowUs := now.UnixMicro()
	for i := range items {
		s.local.merge(&items[i], cs[i], nowUs, 0)
	}
	return nil
}

func (s *kongMode) read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	if s.opts.SyncRate > 0 || !s.br.allow(r.Now) {
		return s.local.counters(r), r.Now, nil
	}
	cs, err := s.readKong(ctx, r)
	return s.readResult(ctx, r, cs, r.Now, err)
}

func (s *kongMode) reset(ctx context.Context, r *ratelimit.Request) error {
	return s.del(ctx, r.Now, func(rc rueidis.Client) (rueidis.Commands, error) {
		if err := checkKong(r.Limits); err != nil {
			return nil, err
		}
		var cmds rueidis.Commands
		for _, l := range r.Limits {
			start := windowStart(l, r.Now)
			w := int64(l.Window / time.Millisecond)
			cmds = append(cmds,
				rc.B().Hdel().Key(s.kongHash(start, l.Window)).Field(r.Key).Build(),
				rc.B().Hdel().Key(s.kongHash(start-w, l.Window)).Field(r.Key).Build())
		}
		return cmds, nil
	})
}

func (s *kongMode) sync(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.SyncRate <= 0 || !s.br.allow(now) {
		s.local.sweep(now)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.cycleTimeout())
	defer cancel()
	if items := s.local.snapshot(now); len(items) > 0 {
		if err := s.syncKong(cctx, now, items); err != nil {
			s.record(ctx, now, err)
			return err
		}
	}
	s.br.success()
	s.synced(now)
	return nil
}

func (s *kongMode) close() { s.loop.close() }

// kongHash returns the name of the hash of window w (whole seconds) that
// contains nowMs.
func (s *kongMode) kongHash(startMs int64, w time.Duration) string {
	return strconv.FormatInt(startMs/1000, 10) + ":" + strconv.FormatInt(int64(w/time.Second), 10) + ":" + s.opts.Namespace
}

// checkKong reports a limit Kong's layout cannot hold.
func checkKong(ls []ratelimit.Limit) error {
	for i, l := range ls {
		if l.Algorithm == ratelimit.TokenBucket || l.Window%time.Second != 0 {
			return fmt.Errorf("limit %d: %w: Kong's redis layout holds fixed and sliding windows of whole seconds only, got %s", i, ratelimit.ErrInvalidLimit, l)
		}
	}
	return nil
}

// windowStart returns the start (Unix ms) of the window of l containing
// now.
func windowStart(l ratelimit.Limit, now time.Time) int64 {
	w := int64(l.Window / time.Millisecond)
	ms := floorDiv(now.UnixNano(), int64(time.Millisecond))
	return ms - ((ms%w)+w)%w
}

// takeKong decides r in Kong's layout in synchronous mode: one pipeline
// adds the cost to every window and reads the previous windows back, and
// the decision is storekit.Apply over the totals. A second pipeline takes
// the cost back from the windows that must not keep it.
func (s *kongMode) takeKong(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		s.record(ctx, r.Now, err)
		return ratelimit.Decision{}, err
	}
	n := len(r.Limits)
	hashes := make([]string, n)
	starts := make([]int64, n)
	res, trips := doMulti(cctx, rc, 3*n, func(i int) rueidis.Completed {
		l := r.Limits[i/3]
		start := windowStart(l, r.Now)
		starts[i/3] = start
		cur := s.kongHash(start, l.Window)
		hashes[i/3] = cur
		switch i % 3 {
		case 0:
			return rc.B().Hincrby().Key(cur).Field(r.Key).Increment(r.Cost).Build()
		case 1:
			return rc.B().Expire().Key(cur).Seconds(int64(2 * l.Window / time.Second)).Build()
		}
		return rc.B().Hget().Key(s.kongHash(start-int64(l.Window/time.Millisecond), l.Window)).Field(r.Key).Build()
	})
	s.redisCalls.Add(uint64(trips))
	var buf [4]storekit.Counter
	cs := buf[:0]
	for i := range n {
		total, err := res[3*i].AsInt64()
		if err == nil {
			err = res[3*i+1].Error()
		}
		var prev int64
		if err == nil {
			prev, err = res[3*i+2].AsInt64()
			if rueidis.IsRedisNil(err) {
				prev, err = 0, nil
			}
		}
		if err != nil {
			err = replyErr("HINCRBY/HGET", err)
			s.record(ctx, r.Now, err)
			return ratelimit.Decision{}, err
		}
		cs = append(cs, storekit.Counter{Start: starts[i], Cur: total - r.Cost, Prev: prev})
	}
	s.record(ctx, r.Now, nil)
	d := storekit.Apply(r, cs)
	s.local.put(r, cs, nil, nil)
	if d.Allowed {
		return d, nil
	}
	var back []int
	for i := range n {
		if !d.State(i).Counted {
			back = append(back, i)
		}
	}
	if len(back) > 0 {
		res, trips := doMulti(cctx, rc, len(back), func(j int) rueidis.Completed {
			return rc.B().Hincrby().Key(hashes[back[j]]).Field(r.Key).Increment(-r.Cost).Build()
		})
		s.redisCalls.Add(uint64(trips))
		for _, x := range res {
			if err := x.Error(); err != nil {
				// The decision stands; the count stays one call too high
				// until the window ends, as when Kong's push fails.
				s.record(ctx, r.Now, replyErr("HINCRBY", err))
				break
			}
		}
	}
	return d, nil
}

// syncKong runs one periodic cycle in Kong's layout: HINCRBY and EXPIRE of
// every batch of waiting hits, then HGET of the current and previous
// window of every counter, in one pipeline.
func (s *kongMode) syncKong(ctx context.Context, now time.Time, items []syncItem) error {
	type push struct {
		hash string
		key  string
		d    int64
		w    time.Duration
	}
	rc, err := s.c.conn(ctx)
	if err != nil {
		return err
	}
	var pushes []push
	for _, it := range items {
		for _, p := range it.p {
			if p.d != 0 {
				pushes = append(pushes, push{s.kongHash(p.start, it.lim.Window), it.key, p.d, it.lim.Window})
			}
		}
	}
	np := 2 * len(pushes)
	res, trips := doMulti(ctx, rc, np+2*len(items), func(i int) rueidis.Completed {
		if i < np {
			p := pushes[i/2]
			if i%2 == 0 {
				return rc.B().Hincrby().Key(p.hash).Field(p.key).Increment(p.d).Build()
			}
			return rc.B().Expire().Key(p.hash).Seconds(int64(2 * p.w / time.Second)).Build()
		}
		j := i - np
		it := items[j/2]
		start := windowStart(it.lim, now)
		if j%2 == 1 {
			start -= int64(it.lim.Window / time.Millisecond)
		}
		return rc.B().Hget().Key(s.kongHash(start, it.lim.Window)).Field(it.key).Build()
	})
	s.redisCalls.Add(uint64(trips))
	for i := range np {
		if err := res[i].Error(); err != nil {
			return replyErr("HINCRBY", err)
		}
	}
	nowUs := now.UnixMicro()
	for j := range items {
		var v [2]int64
		for k := range 2 {
			x, err := res[np+2*j+k].AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				return replyErr("HGET", err)
			}
			v[k] = x
		}
		it := &items[j]
		s.local.merge(it, storekit.Counter{Start: windowStart(it.lim, now), Cur: v[0], Prev: v[1]}, nowUs, 0)
	}
	return nil
}

// readKong reads the counters of r in Kong's layout.
func (s *kongMode) readKong(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return nil, err
	}
	n := len(r.Limits)
	starts := make([]int64, n)
	res, trips := doMulti(ctx, rc, 2*n, func(i int) rueidis.Completed {
		l := r.Limits[i/2]
		start := windowStart(l, r.Now)
		starts[i/2] = start
		if i%2 == 1 {
			start -= int64(l.Window / time.Millisecond)
		}
		return rc.B().Hget().Key(s.kongHash(start, l.Window)).Field(r.Key).Build()
	})
	s.redisCalls.Add(uint64(trips))
	cs := make([]storekit.Counter, n)
	for i := range n {
		var v [2]int64
		for j := range v {
			x, err := res[2*i+j].AsInt64()
			if rueidis.IsRedisNil(err) {
				x, err = 0, nil
			}
			if err != nil {
				return nil, replyErr("HGET", err)
			}
			v[j] = x
		}
		cs[i] = storekit.Counter{Start: starts[i], Cur: v[0], Prev: v[1]}
	}
	return cs, nil
}
