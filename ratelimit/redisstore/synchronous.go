package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// The synchronous mode (SyncRate 0, sluice's layout): every decision
// consults Redis, with plain commands for requests of window limits
// (incr.go) and take.lua for those holding a token bucket, batched with
// the decisions of other callers (batch.go).

// syncMode is the mode of SyncRate 0 in sluice's layout. Its
// goroutines are the batchers (none with MaxBatch 1) and the loop that
// drops expired local counters.
type syncMode struct {
	*Store
	batch batching
	// plans caches take.lua plans by planKey (see plan).
	plans  sync.Map
	nplans atomic.Int64

	stop chan struct{} // closed by close
	wg   sync.WaitGroup
	loop *loop
}

func newSyncMode(st *Store) *syncMode {
	s := &syncMode{Store: st, stop: make(chan struct{})}
	if st.opts.MaxBatch > 1 {
		s.batch.queue = make(chan *takeCall, st.opts.MaxBatch*st.opts.Batchers)
		for range st.opts.Batchers {
			s.wg.Add(1)
			go s.batcher()
		}
	}
	s.loop = st.every(sweepInterval, st.sweep)
	return s
}

func (s *syncMode) take(ctx context.Context, rv ratelimit.Request, windows bool) (ratelimit.Decision, error) {
	r := &rv
	if !windows {
		if err := checkExact(r, r.Cost); err != nil {
			return ratelimit.Decision{}, err
		}
	}
	if !s.br.allow(r.Now) {
		return s.refused(r)
	}
	var d ratelimit.Decision
	var err error
	if windows {
		d, err = s.takeIncr(ctx, r)
	} else {
		d, err = s.takeRedis(ctx, r)
	}
	if err != nil {
		return s.failed(ctx, r, err)
	}
	return d, nil
}

// A multiTake is one request of Store.TakeAll: admitted, then decided
// like take, its call submitted with the others.
type multiTake struct {
	r       ratelimit.Request
	windows bool
	done    bool // the request's answer is set

	c        *takeCall
	cs       []storekit.Counter // a plain call's window starts
	csBuf    [4]storekit.Counter
	res      takeResult
	answered bool
	queued   bool
}

// takeAll decides the requests of ts that are not done as take does, into
// ds and errs, and submits their calls together: in one batch, or queued
// one after the other for the batchers.
func (s *syncMode) takeAll(ctx context.Context, ts []multiTake, ds []ratelimit.Decision, errs []error) {
	n := 0
	for i := range ts {
		t := &ts[i]
		if t.done {
			continue
		}
		r := &t.r
		t.windows = allWindows(r)
		if !t.windows {
			if err := checkExact(r, r.Cost); err != nil {
				errs[i], t.done = err, true
				continue
			}
		}
		if !s.br.allow(r.Now) {
			ds[i], errs[i] = s.refused(r)
			t.done = true
			continue
		}
		if t.windows {
			t.c, t.cs = s.prepIncr(r, t.csBuf[:0])
		} else {
			t.c = s.prepRedis(r)
		}
		n++
	}
	s.submitAll(ctx, ts, n)
	for i := range ts {
		t := &ts[i]
		if t.done {
			continue
		}
		var d ratelimit.Decision
		var err error
		if t.windows {
			d, err = s.finishIncr(ctx, &t.r, t.c, t.cs, t.res, t.answered)
		} else {
			d, err = s.finishRedis(&t.r, t.c, t.res, t.answered)
		}
		if err != nil {
			d, err = s.failed(ctx, &t.r, err)
		}
		ds[i], errs[i] = d, err
	}
}

func (s *syncMode) read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	if !s.br.allow(r.Now) {
		return s.local.counters(r), r.Now, nil
	}
	cs, now, err := s.readScript(ctx, r)
	return s.readResult(ctx, r, cs, now, err)
}

func (s *syncMode) reset(ctx context.Context, r *ratelimit.Request) error {
	return s.del(ctx, r.Now, func(rc rueidis.Client) (rueidis.Commands, error) {
		return delKeys(rc, s.resetKeys(r)), nil
	})
}

func (s *syncMode) sync(ctx context.Context, now time.Time) error { return s.sweep(ctx, now) }

func (s *syncMode) close() {
	close(s.stop)
	s.wg.Wait()
	s.loop.close()
}

// maxExact is the largest integer every double represents exactly.
const maxExact = 1 << 53

// checkExact reports a limit whose arithmetic would leave the range where
// Lua's doubles are exact.
func checkExact(r *ratelimit.Request, cost int64) error {
	for i, l := range r.Limits {
		if l.Algorithm == ratelimit.TokenBucket {
			t := emission(&l)
			tau := mulSat(uint64(l.Capacity()), t)
			inc := mulSat(uint64(min(cost, l.Capacity())), t)
			if tau > maxExact/2 || inc > maxExact/2 {
				return fmt.Errorf("limit %d: %w: %s is too large for exact arithmetic in redis (burst and cost times the emission interval in us must stay below 2^52)", i, ratelimit.ErrInvalidLimit, l)
			}
			continue
		}
		hi, lo := bits.Mul64(uint64(l.Count), uint64(l.Window/time.Millisecond))
		if hi != 0 || lo > maxExact {
			return fmt.Errorf("limit %d: %w: %s is too large for exact arithmetic in redis (count*window in ms must stay below 2^53)", i, ratelimit.ErrInvalidLimit, l)
		}
	}
	return nil
}

// emission is storekit.Emission, unsigned.
func emission(l *ratelimit.Limit) uint64 { return uint64(storekit.Emission(l)) }

// mulSat returns a*b, saturating at MaxUint64.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// takeRedis decides r with take.lua, in a batch with other concurrent
// decisions unless MaxBatch is 1, and rebuilds the decision with
// storekit.Apply from the counters the script read.
func (s *syncMode) takeRedis(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	c := s.prepRedis(r)
	res, answered := s.submit(ctx, c)
	return s.finishRedis(r, c, res, answered)
}

// prepRedis returns the take.lua call of r.
func (s *syncMode) prepRedis(r *ratelimit.Request) *takeCall {
	c := newCall()
	c.keys = make([]string, len(r.Limits))
	for i, l := range r.Limits {
		c.keys[i] = s.counterKey(r.Key, storekit.CounterID(l))
	}
	c.plan, c.nowArg, c.n, c.now = s.plan(r), s.nowArg(r.Now), len(r.Limits), r.Now
	if s.cluster {
		c.slot = slot(c.keys[0])
	}
	return c
}

// finishRedis decides r from the answer to its call c.
func (s *syncMode) finishRedis(r *ratelimit.Request, c *takeCall, res takeResult, answered bool) (ratelimit.Decision, error) {
	if answered {
		free(c)
	}
	if res.err != nil {
		return ratelimit.Decision{}, res.err
	}
	return s.decodeTake(r, res.vals)
}

// A takePlan is the take.lua arguments that requests with the same limits,
// cost and penalty share: cost, penalty, n and 4 values per limit. A batch
// sends each distinct plan once.
type takePlan struct {
	args []string
}

// planKey identifies a plan of at most 4 limits, the ones cached.
type planKey struct {
	n       int
	cost    int64
	penalty bool
	limits  [4]ratelimit.Limit
}

// maxPlans bounds the plans a store caches: a few per policy are usual;
// beyond the bound, plans are built for each request.
const maxPlans = 1024

// plan returns the plan of r, cached when r has at most 4 limits.
func (s *syncMode) plan(r *ratelimit.Request) *takePlan {
	var k planKey
	cacheable := len(r.Limits) <= len(k.limits)
	if cacheable {
		k.n, k.cost, k.penalty = len(r.Limits), r.Cost, r.Penalty
		copy(k.limits[:], r.Limits)
		if p, ok := s.plans.Load(k); ok {
			return p.(*takePlan)
		}
	}
	args := make([]string, 3, 3+4*len(r.Limits))
	args[0] = itoa(r.Cost)
	args[1] = "0"
	if r.Penalty {
		args[1] = "1"
	}
	args[2] = itoa(int64(len(r.Limits)))
	for _, l := range r.Limits {
		var kind, a, b int64
		switch l.Algorithm {
		case ratelimit.FixedWindow:
			kind, a = 0, int64(l.Window/time.Millisecond)
		case ratelimit.SlidingWindow:
			kind, a = 1, int64(l.Window/time.Millisecond)
		default:
			t := emission(&l)
			kind = 2
			a = int64(mulSat(uint64(l.Capacity()), t))
			b = -1
			if r.Cost <= l.Capacity() {
				b = int64(mulSat(uint64(r.Cost), t))
			}
		}
		args = append(args, itoa(kind), itoa(l.Count), itoa(a), itoa(b))
	}
	p := &takePlan{args: args}
	if cacheable && s.nplans.Load() < maxPlans {
		if _, loaded := s.plans.LoadOrStore(k, p); !loaded {
			s.nplans.Add(1)
		}
	}
	return p
}

// decodeTake turns one request's share of a take.lua reply into a
// decision, replaying storekit.Apply on the counters the script read.
func (s *syncMode) decodeTake(r *ratelimit.Request, vals []rueidis.RedisMessage) (ratelimit.Decision, error) {
	n := len(r.Limits)
	if len(vals) != 2+3*n {
		return ratelimit.Decision{}, fmt.Errorf("%w: take.lua returned %d values, want %d", ErrBadReply, len(vals), 2+3*n)
	}
	if vals[0].IsString() {
		msg, _ := vals[0].ToString()
		return ratelimit.Decision{}, fmt.Errorf("%w: take.lua: %s", ErrBadReply, msg)
	}
	var intBuf [2 + 3*4]int64
	ints, err := appendInt64s(intBuf[:0], vals)
	if err != nil {
		return ratelimit.Decision{}, fmt.Errorf("%w: take.lua: %w", ErrBadReply, err)
	}
	var buf [4]storekit.Counter
	cs := buf[:0]
	for i := range n {
		cs = append(cs, storekit.Counter{Start: ints[2+3*i], Cur: ints[3+3*i], Prev: ints[4+3*i]})
	}
	rr := *r
	if !s.opts.CallerClock {
		rr.Now = time.UnixMicro(ints[1])
	}
	d := storekit.Apply(&rr, cs)
	if d.Allowed != (ints[0] == 1) {
		return ratelimit.Decision{}, fmt.Errorf("%w: take.lua decided allowed=%v but storekit.Apply %v for %q", ErrBadReply, ints[0] == 1, d.Allowed, r.Key)
	}
	s.local.put(r, cs, nil, nil)
	return d, nil
}

// readScript reads the counters of r in sluice's layout with inspect.lua.
func (s *syncMode) readScript(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	keys, starts := s.keysOf(r)
	res, trips := inspectScript.exec(ctx, rc, keys, nil)
	s.redisCalls.Add(uint64(trips))
	vals, err := res.ToArray()
	if err != nil {
		return nil, time.Time{}, replyErr("inspect.lua", err)
	}
	if len(vals) != 2+len(keys) {
		return nil, time.Time{}, fmt.Errorf("%w: inspect.lua returned %d values, want %d", ErrBadReply, len(vals), 2+len(keys))
	}
	v := make([]int64, len(vals))
	for i := range vals {
		str, err := vals[i].ToString()
		if err == nil && str != "" {
			v[i], err = strconv.ParseInt(str, 10, 64)
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%w: inspect.lua value %d: %w", ErrBadReply, i, err)
		}
	}
	now := r.Now
	if !s.opts.CallerClock && !allWindows(r) {
		now = time.UnixMicro(v[0]*1_000_000 + v[1])
	}
	cs := make([]storekit.Counter, len(r.Limits))
	j := 2
	for i, l := range r.Limits {
		if l.Algorithm == ratelimit.TokenBucket {
			cs[i] = storekit.Counter{Start: v[j]}
			j++
			continue
		}
		cs[i] = storekit.Counter{Start: starts[i], Cur: v[j], Prev: v[j+1]}
		j += 2
	}
	return cs, now, nil
}
