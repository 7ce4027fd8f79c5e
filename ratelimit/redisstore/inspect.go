package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Reading and resetting counters (Request.Peek, ratelimit.Inspector,
// ratelimit.LeaseInspector). A store reads where it decides: Redis in
// synchronous mode (sluice's layout through inspect.lua, Kong's with
// HGET), this node's counters with LocalOnly, in periodic mode (the
// totals of the last sync plus this node's hits since) and while Redis
// is unavailable. Reset deletes the counters in Redis whatever the sync
// rate, so that every node sharing the namespace sees it, and on this
// node; see Reset for how soon other nodes see it.

var inspectScript = mustScript("lua/inspect.lua")

var (
	_ ratelimit.Inspector      = (*Store)(nil)
	_ ratelimit.LeaseInspector = (*Store)(nil)
)

// peek decides r, validated with Cost and Now set, on the counters Take
// would use, changing none of them.
func (s *Store) peek(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	cs, now, err := s.read(ctx, r)
	if err != nil {
		return ratelimit.Decision{}, err
	}
	r.Now = now
	return storekit.Apply(r, cs), nil
}

// Inspect returns the counters of r.Key; see ratelimit.Inspector.
func (s *Store) Inspect(ctx context.Context, r ratelimit.Request) ([]ratelimit.CounterState, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return nil, err
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	cs, now, err := s.read(ctx, &r)
	if err != nil {
		return nil, err
	}
	return storekit.States(r.Limits, cs, now), nil
}

// read returns the counters of r as a decision now would see them, and
// the time it would be decided at (Redis' clock for a request holding a
// token bucket, unless CallerClock).
func (s *Store) read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	if s.opts.KongLayout {
		if err := checkKong(r.Limits); err != nil {
			return nil, time.Time{}, err
		}
	}
	if s.opts.EnvoyLayout {
		if err := checkEnvoy(r.Limits); err != nil {
			return nil, time.Time{}, err
		}
	}
	if s.opts.SyncRate != 0 || !s.br.allow(r.Now) {
		return s.local.counters(r), r.Now, nil
	}
	var cs []storekit.Counter
	now := r.Now
	var err error
	switch {
	case s.opts.KongLayout:
		cs, err = s.readKong(ctx, r)
	case s.opts.EnvoyLayout:
		cs, err = s.readEnvoy(ctx, r)
	default:
		cs, now, err = s.readScript(ctx, r)
	}
	s.record(r.Now, err)
	if err == nil {
		return cs, now, nil
	}
	if isUnavailable(err) && !s.opts.Strict {
		return s.local.counters(r), r.Now, nil
	}
	if isUnavailable(err) && !errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil, time.Time{}, err
}

// readScript reads the counters of r in sluice's layout with inspect.lua.
func (s *Store) readScript(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
	var keys []string
	starts := make([]int64, len(r.Limits))
	for i, l := range r.Limits {
		id := storekit.CounterID(l)
		if l.Algorithm == ratelimit.TokenBucket {
			keys = append(keys, s.counterKey(r.Key, id))
			continue
		}
		w := int64(l.Window / time.Millisecond)
		starts[i] = nowMs - (nowMs%w+w)%w
		cur, prev := s.windowKeys(r.Key, id, starts[i], w, true)
		keys = append(keys, cur, prev)
	}
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

// readKong reads the counters of r in Kong's layout.
func (s *Store) readKong(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, error) {
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

// Reset deletes the counters of r.Key in Redis and on this node; see
// ratelimit.Inspector. Every node reads the reset counters at its next
// decision in synchronous mode, except a sliding window's previous count
// a node already holds final (it keeps it until the window ends); in
// periodic mode at the first sync cycle after this node's next one. With
// LocalOnly only this node's counters exist. When Redis does not answer
// the local counters are still reset and the error is returned.
func (s *Store) Reset(ctx context.Context, r ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return err
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	s.local.reset(r.Key, r.Limits)
	if s.opts.SyncRate < 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.record(r.Now, err)
		return err
	}
	var cmds rueidis.Commands
	switch {
	case s.opts.EnvoyLayout:
		if err := checkEnvoy(r.Limits); err != nil {
			return err
		}
		key, _ := envoyWindow(&r)
		cmds = append(cmds, rc.B().Del().Key(key).Build())
	case s.opts.KongLayout:
		if err := checkKong(r.Limits); err != nil {
			return err
		}
		for _, l := range r.Limits {
			start := windowStart(l, r.Now)
			w := int64(l.Window / time.Millisecond)
			cmds = append(cmds,
				rc.B().Hdel().Key(s.kongHash(start, l.Window)).Field(r.Key).Build(),
				rc.B().Hdel().Key(s.kongHash(start-w, l.Window)).Field(r.Key).Build())
		}
	default:
		nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
		var keys []string
		for _, l := range r.Limits {
			id := storekit.CounterID(l)
			if l.Algorithm == ratelimit.TokenBucket {
				keys = append(keys, s.counterKey(r.Key, id))
				continue
			}
			w := int64(l.Window / time.Millisecond)
			start := nowMs - (nowMs%w+w)%w
			cur, prev := s.windowKeys(r.Key, id, start, w, true)
			keys = append(keys, cur, prev)
		}
		// One DEL per key: on Cluster a multi-key DEL must stay in one
		// slot, which a key's counters do, but one per key is as cheap in
		// a pipeline and needs no such care.
		for _, k := range keys {
			cmds = append(cmds, rc.B().Del().Key(k).Build())
		}
	}
	res := rc.DoMulti(ctx, cmds...)
	s.redisCalls.Add(1)
	for _, x := range res {
		if err := x.Error(); err != nil {
			err = replyErr("DEL", err)
			s.record(r.Now, err)
			return err
		}
	}
	s.record(r.Now, nil)
	if s.opts.SyncRate > 0 && !s.opts.KongLayout {
		// Other nodes re-read a counter the journal says changed.
		s.cycle.mu.Lock()
		for _, l := range r.Limits {
			if len(s.cycle.unjournaled) < maxUnjournaled {
				s.cycle.unjournaled = append(s.cycle.unjournaled, journalMember(r.Key, storekit.CounterID(l)))
			}
		}
		s.cycle.mu.Unlock()
	}
	return nil
}

// Leases returns the live leases of key, read where Acquire decides them;
// see ratelimit.LeaseInspector.
func (s *Store) Leases(ctx context.Context, key string, now time.Time) ([]ratelimit.LeaseState, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	if now.IsZero() {
		now = time.Now()
	}
	if s.opts.SyncRate < 0 || !s.br.allow(now) {
		return s.local.leaseStates(key, now), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.record(now, err)
		if isUnavailable(err) && !s.opts.Strict {
			return s.local.leaseStates(key, now), nil
		}
		return nil, err
	}
	res := rc.DoMulti(ctx,
		rc.B().Time().Build(),
		rc.B().Zrange().Key(s.leaseKey(key)).Min("0").Max("-1").Withscores().Build())
	s.redisCalls.Add(1)
	tm, err := res[0].AsStrSlice()
	if err == nil && len(tm) != 2 {
		err = fmt.Errorf("%w: TIME returned %d values", ErrBadReply, len(tm))
	}
	var zs []rueidis.ZScore
	if err == nil {
		zs, err = res[1].AsZScores()
	}
	if err != nil {
		err = replyErr("ZRANGE", err)
		s.record(now, err)
		if isUnavailable(err) && !s.opts.Strict {
			return s.local.leaseStates(key, now), nil
		}
		return nil, err
	}
	s.record(now, nil)
	nowUs := now.UnixMicro()
	if !s.opts.CallerClock {
		sec, err1 := strconv.ParseInt(tm[0], 10, 64)
		us, err2 := strconv.ParseInt(tm[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: TIME returned %q", ErrBadReply, tm)
		}
		nowUs = sec*1_000_000 + us
	}
	var out []ratelimit.LeaseState
	for _, z := range zs {
		exp := int64(z.Score)
		if exp <= nowUs {
			continue
		}
		// Expiry as this node's clock sees it: the time left, from now.
		out = append(out, ratelimit.LeaseState{ID: z.Member, Expires: now.Add(time.Duration(exp-nowUs) * time.Microsecond)})
	}
	return out, nil
}

// ResetLeases drops the leases of key in Redis and on this node; see
// ratelimit.LeaseInspector.
func (s *Store) ResetLeases(ctx context.Context, key string) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	s.local.resetLeases(key)
	if s.opts.SyncRate < 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.record(time.Now(), err)
		return err
	}
	res, trips := do(ctx, rc, func() rueidis.Completed { return rc.B().Del().Key(s.leaseKey(key)).Build() })
	s.redisCalls.Add(uint64(trips))
	if err := res.Error(); err != nil {
		err = replyErr("DEL", err)
		s.record(time.Now(), err)
		return err
	}
	return nil
}

// counters copies this node's counters of r (zero for those it does not
// hold).
func (l *local) counters(r *ratelimit.Request) []storekit.Counter {
	sh := l.shard(r.Key)
	cs := make([]storekit.Counter, len(r.Limits))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, lim := range r.Limits {
		if e := sh.m[lkey{r.Key, storekit.CounterID(lim)}]; e != nil {
			cs[i] = e.c
		}
	}
	return cs
}

// reset drops this node's counters of key for limits, with the hits they
// had waiting to be pushed.
func (l *local) reset(key string, limits []ratelimit.Limit) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, lim := range limits {
		delete(sh.m, lkey{key, storekit.CounterID(lim)})
	}
}

// leaseStates lists this node's live leases of key.
func (l *local) leaseStates(key string, now time.Time) []ratelimit.LeaseState {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []ratelimit.LeaseState
	for id, exp := range sh.leases[key] {
		if exp > now.UnixNano() {
			out = append(out, ratelimit.LeaseState{ID: id, Expires: time.Unix(0, exp)})
		}
	}
	return out
}

// resetLeases drops this node's leases of key.
func (l *local) resetLeases(key string) {
	sh := l.shard(key)
	sh.mu.Lock()
	delete(sh.leases, key)
	sh.mu.Unlock()
}
