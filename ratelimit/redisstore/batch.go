package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
)

// Batching. Concurrent synchronous decisions are gathered into one
// pipeline: a batcher goroutine takes the first waiting request, adds every
// other request already waiting (up to MaxBatch), and sends them together:
// the requests decided by take.lua as one script call (on Cluster, one per
// slot), those of window limits only as their plain commands (incr.go). It
// never waits for a batch to fill, so a lone caller pays no delay; under
// load the batches grow by themselves. Several batchers keep several
// batches in flight, pipelined on the shared connection. A script's
// per-call cost (command dispatch, TIME) is then paid once per batch
// instead of once per decision, and every batch is one write to the socket
// instead of one per caller.

// batching is the state of synchronous decisions: the calls waiting for
// a batcher (nil with MaxBatch 1, or in another mode) and the calls and
// batches out.
type batching struct {
	queue    chan *takeCall
	inflight atomic.Int64
}

// takeCall is one request waiting for a batch: a take.lua request, or with
// plain set the plain commands of a request of window limits.
type takeCall struct {
	keys   []string
	plan   *takePlan
	nowArg string // the request's time, or "" for Redis TIME
	n      int
	slot   uint16
	now    time.Time

	// Plain commands (incr.go): ctrs holds the commands of each counter,
	// of maps each limit to its counter (limits of one window share one).
	plain  bool
	cost   int64
	ctrs   []plainCounter
	of     []int
	ctrBuf [4]plainCounter
	ofBuf  [4]int

	// one holds the result of a batch of this call alone that sends
	// one command (see doMultiInto).
	one [1]rueidis.RedisResult

	done chan takeResult // buffered: a batcher never blocks on it
}

// plainCounter is one counter of a plain call: the key of the window of
// now and its time to live in ms, whether to send PEXPIRE, and the
// previous window's key ("" when no limit is sliding or its count is
// known). pv is that count when the previous window is not read (0 for a
// fixed window); final flags a previous window read once it could no
// longer change (see prevGrace).
type plainCounter struct {
	cur, prev string
	ttl       int64
	expire    bool
	pv        int64
	final     bool
}

// cmds returns the number of plain commands of the counter: INCRBY, then
// PEXPIRE and GET when sent.
func (pc *plainCounter) cmds() int {
	n := 1
	if pc.expire {
		n++
	}
	if pc.prev != "" {
		n++
	}
	return n
}

// callPool recycles takeCalls that were answered; a call whose caller
// gave up is left to the garbage collector, since a batcher may still
// send on its channel.
var callPool = sync.Pool{New: func() any { return &takeCall{done: make(chan takeResult, 1)} }}

// newCall returns a cleared call from the pool.
func newCall() *takeCall {
	c := callPool.Get().(*takeCall)
	c.ctrs, c.of = c.ctrBuf[:0], c.ofBuf[:0]
	return c
}

// free returns an answered call to the pool.
func free(c *takeCall) {
	*c = takeCall{done: c.done}
	callPool.Put(c)
}

// ncmds returns the number of plain commands of c.
func (c *takeCall) ncmds() int {
	n := 0
	for u := range c.ctrs {
		n += c.ctrs[u].cmds()
	}
	return n
}

type takeResult struct {
	vals []rueidis.RedisMessage // the call's share of take.lua's reply
	res  []rueidis.RedisResult  // a plain call's results, in order
	err  error
}

// submit sends c, directly when nothing else is in flight (a lone caller
// saves the hand-off to a batcher), else through a batcher, and waits for
// its answer. answered reports whether c may be freed: a call whose caller
// gave up may still be answered by a batcher.
func (s *syncMode) submit(ctx context.Context, c *takeCall) (res takeResult, answered bool) {
	// The compare-and-swap lets one caller, not every caller that looked
	// at the same moment, take the direct path.
	direct := s.batch.queue == nil
	if direct {
		s.batch.inflight.Add(1)
	} else {
		direct = len(s.batch.queue) == 0 && s.batch.inflight.CompareAndSwap(0, 1)
	}
	if direct {
		one := [1]*takeCall{c}
		s.runBatch(one[:])
		s.batch.inflight.Add(-1)
		return <-c.done, true
	}
	if err := s.enqueue(ctx, c); err != nil {
		return takeResult{err: err}, true
	}
	return s.wait(ctx, c)
}

// submitAll submits the calls of ts that are not done, n of them, and
// waits for their answers: as one batch when nothing else is in flight,
// else queued one after the other, so that a batcher usually sends them
// together. The queue must exist (MaxBatch > 1) and n be at most MaxBatch.
func (s *syncMode) submitAll(ctx context.Context, ts []multiTake, n int) {
	if n == 0 {
		return
	}
	if len(s.batch.queue) == 0 && s.batch.inflight.CompareAndSwap(0, 1) {
		var buf [4]*takeCall
		batch := buf[:0]
		for i := range ts {
			if !ts[i].done {
				batch = append(batch, ts[i].c)
			}
		}
		s.runBatch(batch)
		s.batch.inflight.Add(-1)
		for i := range ts {
			if t := &ts[i]; !t.done {
				t.res, t.answered = <-t.c.done, true
			}
		}
		return
	}
	var err error
	for i := range ts {
		t := &ts[i]
		if t.done {
			continue
		}
		if err == nil {
			err = s.enqueue(ctx, t.c)
		}
		if err != nil {
			t.res, t.answered = takeResult{err: err}, true
			continue
		}
		t.queued = true
	}
	for i := range ts {
		if t := &ts[i]; t.queued {
			t.res, t.answered = s.wait(ctx, t.c)
		}
	}
}

// enqueue hands c to the batchers.
func (s *syncMode) enqueue(ctx context.Context, c *takeCall) error {
	select {
	case s.batch.queue <- c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redisstore: queueing a decision: %w", ctx.Err())
	case <-s.stop:
		return ratelimit.ErrClosed
	}
}

// wait waits for the answer to c, queued; answered is as for submit.
func (s *syncMode) wait(ctx context.Context, c *takeCall) (res takeResult, answered bool) {
	select {
	case res := <-c.done:
		return res, true
	case <-ctx.Done():
		// The caller's own deadline, which says nothing of Redis: the
		// batch, bounded by Timeout, reports its own outcome to the
		// breaker.
		return takeResult{err: fmt.Errorf("redisstore: waiting for a decision: %w", ctx.Err())}, false
	case <-s.stop:
		return takeResult{err: ratelimit.ErrClosed}, false
	}
}

// batcher runs batches until Close.
func (s *syncMode) batcher() {
	defer s.wg.Done()
	batch := make([]*takeCall, 0, s.opts.MaxBatch)
	for {
		select {
		case <-s.stop:
			return
		case c := <-s.batch.queue:
			batch = append(batch[:0], c)
		}
	fill:
		for len(batch) < s.opts.MaxBatch {
			select {
			case c := <-s.batch.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		s.batch.inflight.Add(1)
		s.runBatch(batch)
		s.batch.inflight.Add(-1)
		clear(batch)
	}
}

// plainOp is one plain command of a batch: command k (0 INCRBY, 1 PEXPIRE,
// 2 GET) of limit i of call c.
type plainOp struct {
	c    *takeCall
	i, k int
}

// runBatch sends, in one pipeline, one take.lua call per slot of the
// script requests of batch and the plain commands of the others, and hands
// every request its share of the replies.
func (s *syncMode) runBatch(batch []*takeCall) {
	if State(s.br.state.Load()) == StateFallback {
		// Redis failed while these waited: they go local at once
		// instead of each waiting for a dead server.
		for _, c := range batch {
			c.done <- takeResult{err: ErrUnavailable}
		}
		return
	}
	// A call's fields are read only before the first answer: an answered
	// call goes back to its caller.
	// Small batches (a lone caller's) keep the bookkeeping of plain calls
	// on the stack.
	var scripts []*takeCall
	var plainBuf [8]*takeCall
	var ncmdBuf [8]int
	plains, ncmds := plainBuf[:0], ncmdBuf[:0] // ncmds: per plain call, its number of commands
	nplain := 0
	for _, c := range batch {
		if c.plain {
			n := c.ncmds()
			plains, ncmds = append(plains, c), append(ncmds, n)
			nplain += n
		} else {
			scripts = append(scripts, c)
		}
	}
	if s.cluster && len(scripts) > 1 {
		slices.SortStableFunc(scripts, func(a, b *takeCall) int { return cmp.Compare(a.slot, b.slot) })
	}
	var callBuf [1]call
	var groupBuf [1][]*takeCall
	calls, groups := callBuf[:0], groupBuf[:0]
	for i := 0; i < len(scripts); {
		j := i + 1
		if s.cluster {
			for j < len(scripts) && scripts[j].slot == scripts[i].slot {
				j++
			}
		} else {
			j = len(scripts)
		}
		g := scripts[i:j]
		// Each distinct plan once (usually one or two per batch), then
		// every request's time and plan number.
		var plans []*takePlan
		idx := make([]int, len(g))
		nargs := 0
		for ci, c := range g {
			pi := slices.Index(plans, c.plan)
			if pi < 0 {
				pi = len(plans)
				plans = append(plans, c.plan)
				nargs += len(c.plan.args)
			}
			idx[ci] = pi + 1
		}
		var keys []string
		args := make([]string, 0, 3+nargs+2*len(g))
		args = append(args, itoa(int64(len(g))), s.minTTL(), itoa(int64(len(plans))))
		for _, p := range plans {
			args = append(args, p.args...)
		}
		for ci, c := range g {
			keys = append(keys, c.keys...)
			args = append(args, c.nowArg, itoa(int64(idx[ci])))
		}
		calls = append(calls, call{keys: keys, args: args})
		groups = append(groups, g)
		i = j
	}
	var opBuf [8]plainOp
	ops := opBuf[:0]
	for _, c := range plains {
		for i := range c.ctrs {
			ops = append(ops, plainOp{c, i, 0})
			if c.ctrs[i].expire {
				ops = append(ops, plainOp{c, i, 1})
			}
			if c.ctrs[i].prev != "" {
				ops = append(ops, plainOp{c, i, 2})
			}
		}
	}

	ctx := newCallCtx(s.opts.Timeout)
	defer ctx.release()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.record(context.Background(), batch[0].now, err)
		for _, c := range batch {
			c.done <- takeResult{err: err}
		}
		return
	}
	res, trips := doMultiInto(ctx, rc, &batch[0].one, len(calls)+len(ops), func(j int) rueidis.Completed {
		if j < len(calls) {
			return takeScript.evalsha(rc, calls[j].keys, calls[j].args)
		}
		op := ops[j-len(calls)]
		c := op.c
		switch op.k {
		case 0:
			return rc.B().Incrby().Key(c.ctrs[op.i].cur).Increment(c.cost).Build()
		case 1:
			return rc.B().Pexpire().Key(c.ctrs[op.i].cur).Milliseconds(c.ctrs[op.i].ttl).Build()
		default:
			return rc.B().Get().Key(c.ctrs[op.i].prev).Build()
		}
	})
	trips += takeScript.rerunNoScript(ctx, rc, calls, res[:len(calls)])
	s.redisCalls.Add(uint64(trips))

	// Check every reply first: the breaker hears of this round trip before
	// any caller gets its answer. A plain command's error that is Redis'
	// answer (WRONGTYPE...) is its caller's to report.
	var failed error
	replies := make([][]rueidis.RedisMessage, len(groups))
	errs := make([]error, len(groups))
	for gi, g := range groups {
		vals, err := res[gi].ToArray()
		if err != nil {
			err = replyErr("take.lua", err)
		} else if want := replyLen(g); len(vals) != want {
			err = fmt.Errorf("%w: take.lua returned %d values for %d requests, want %d", ErrBadReply, len(vals), len(g), want)
		}
		replies[gi], errs[gi] = vals, err
		if err != nil {
			failed = err
		}
	}
	for _, r := range res[len(calls):] {
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			if err = replyErr("a plain command", err); failed == nil || isUnavailable(err) {
				failed = err
			}
		}
	}
	s.record(context.Background(), batch[0].now, failed)
	for gi, g := range groups {
		vals, err := replies[gi], errs[gi]
		if err != nil {
			for _, c := range g {
				c.done <- takeResult{err: err}
			}
			continue
		}
		off := 0
		for _, c := range g {
			m := 2 + 3*c.n
			c.done <- takeResult{vals: vals[off : off+m : off+m]}
			off += m
		}
	}
	off := len(calls)
	for pi, c := range plains {
		m := ncmds[pi]
		c.done <- takeResult{res: res[off : off+m : off+m]}
		off += m
	}
}

func replyLen(g []*takeCall) int {
	n := 0
	for _, c := range g {
		n += 2 + 3*c.n
	}
	return n
}

// slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key without one, modulo 16384.
func slot(key string) uint16 {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}
