package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Concurrency leases (ratelimit.LeaseStore, ratelimit.LeaseInspector), the
// same in every mode: decided in Redis (a sorted set per key, acquire.lua)
// unless LocalOnly, and on this node's leases while Redis is unavailable.

// Acquire takes or renews one concurrency lease. Leases are decided in
// Redis whatever the sync rate (except LocalOnly): a bound on concurrent
// holders is only worth having if it is shared. When Redis does not answer
// within Options.Timeout the lease is decided locally; when ctx ends first,
// Acquire returns an error wrapping ctx.Err(), as Take does.
func (s *Store) Acquire(ctx context.Context, r ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	if s.closed.Load() {
		return ratelimit.Lease{}, ratelimit.ErrClosed
	}
	if err := storekit.ValidateLease(&r); err != nil {
		return ratelimit.Lease{}, err
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if s.opts.SyncRate < 0 {
		return s.local.acquire(&r), nil
	}
	if !s.br.allow(r.Now) {
		if s.opts.Strict {
			return ratelimit.Lease{}, ErrUnavailable
		}
		s.localDecisions.Add(1)
		return s.local.acquire(&r), nil
	}
	l, err := s.acquireRedis(ctx, &r)
	if err == nil {
		s.br.success()
		return l, nil
	}
	if s.unavailable(ctx, r.Now, err) {
		if s.opts.Strict {
			return ratelimit.Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.localDecisions.Add(1)
		return s.local.acquire(&r), nil
	}
	return ratelimit.Lease{}, callerErr(ctx, err)
}

func (s *Store) acquireRedis(ctx context.Context, r *ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return ratelimit.Lease{}, err
	}
	args := []string{s.nowArg(r.Now), r.ID, strconv.FormatInt(r.Max, 10), strconv.FormatInt(int64(r.TTL/time.Microsecond), 10), s.minTTL()}
	res, trips := acquireScript.exec(ctx, rc, []string{s.leaseKey(r.Key)}, args)
	s.redisCalls.Add(uint64(trips))
	vals, err := res.ToArray()
	if err != nil {
		return ratelimit.Lease{}, replyErr("acquire.lua", err)
	}
	if len(vals) != 4 {
		return ratelimit.Lease{}, fmt.Errorf("%w: acquire.lua returned %d values, want 4", ErrBadReply, len(vals))
	}
	v, err := int64s(vals)
	if err != nil {
		return ratelimit.Lease{}, fmt.Errorf("%w: acquire.lua: %w", ErrBadReply, err)
	}
	now := r.Now
	if !s.opts.CallerClock {
		now = time.UnixMicro(v[2])
	}
	if v[0] == 1 {
		return ratelimit.Lease{Allowed: true, Active: v[1], Remaining: max(r.Max-v[1], 0), Expires: now.Add(r.TTL)}, nil
	}
	retry := time.Duration(v[3]-v[2]) * time.Microsecond
	if s.opts.CallerClock {
		retry = time.UnixMicro(v[3]).Sub(now)
	}
	return ratelimit.Lease{Active: v[1], Remaining: max(r.Max-v[1], 0), RetryAfter: max(retry, 0)}, nil
}

// Release ends lease id on key. Unknown, expired or already released
// leases are not an error. When Redis does not answer, the lease is
// released locally and lapses in Redis at its TTL.
func (s *Store) Release(ctx context.Context, key, id string) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	s.local.release(key, id)
	if s.opts.SyncRate < 0 || !s.br.allow(time.Now()) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		if s.unavailable(ctx, time.Now(), err) {
			return nil
		}
		return callerErr(ctx, err)
	}
	res, trips := do(cctx, rc, func() rueidis.Completed { return rc.B().Zrem().Key(s.leaseKey(key)).Member(id).Build() })
	s.redisCalls.Add(uint64(trips))
	err = res.Error()
	if err == nil {
		s.br.success()
		return nil
	}
	err = replyErr("ZREM", err)
	if s.unavailable(ctx, time.Now(), err) {
		return nil
	}
	return callerErr(ctx, err)
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
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		if s.unavailable(ctx, now, err) && !s.opts.Strict {
			return s.local.leaseStates(key, now), nil
		}
		return nil, callerErr(ctx, err)
	}
	res := rc.DoMulti(cctx,
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
		if s.unavailable(ctx, now, err) && !s.opts.Strict {
			return s.local.leaseStates(key, now), nil
		}
		return nil, callerErr(ctx, err)
	}
	s.record(ctx, now, nil)
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
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		s.record(ctx, time.Now(), err)
		return callerErr(ctx, err)
	}
	res, trips := do(cctx, rc, func() rueidis.Completed { return rc.B().Del().Key(s.leaseKey(key)).Build() })
	s.redisCalls.Add(uint64(trips))
	if err := res.Error(); err != nil {
		err = replyErr("DEL", err)
		s.record(ctx, time.Now(), err)
		return callerErr(ctx, err)
	}
	return nil
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
