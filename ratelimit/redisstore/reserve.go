package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

var (
	reserveScript   = mustScript("lua/reserve.lua")
	unreserveScript = mustScript("lua/unreserve.lua")

	_ ratelimit.Reserver = (*Store)(nil)
)

// Reserve takes r.Cost units of r.Key for a later moment; see
// ratelimit.Reserver. In synchronous mode a reservation is one call of an
// atomic script, exact as Take is; with CallerClock unset it is decided on
// Redis' clock and the returned moment is r.Now plus the delay Redis
// found. When Redis does not answer, and with LocalOnly, it is decided on
// local counters as Take is. The periodic and Kong-layout modes cannot
// reserve (their counts reach Redis a cycle late, or in Kong's layout): they
// return an error wrapping ratelimit.ErrReserveUnsupported. Other errors
// are as for Take.
func (s *Store) Reserve(ctx context.Context, r ratelimit.Request, maxDelay time.Duration) (ratelimit.Booking, error) {
	if err := s.checkReserve(&r); err != nil {
		return ratelimit.Booking{}, err
	}
	if s.opts.SyncRate < 0 {
		return s.local.reserve(&r, maxDelay), nil
	}
	if !s.br.allow(r.Now) {
		if s.opts.Strict {
			return ratelimit.Booking{}, ErrUnavailable
		}
		s.localDecisions.Add(1)
		return s.local.reserve(&r, maxDelay), nil
	}
	b, err := s.reserveRedis(ctx, &r, maxDelay)
	if err == nil {
		s.br.success()
		return b, nil
	}
	if s.unavailable(ctx, r.Now, err) {
		if s.opts.Strict {
			return ratelimit.Booking{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.localDecisions.Add(1)
		return s.local.reserve(&r, maxDelay), nil
	}
	return ratelimit.Booking{}, callerErr(ctx, err)
}

// Unreserve gives back what b took; see ratelimit.Reserver. When Redis does
// not answer, the units stay taken in Redis until their windows pass (only
// local counters are given back). Errors are as for Reserve.
func (s *Store) Unreserve(ctx context.Context, r ratelimit.Request, b ratelimit.Booking) error {
	if err := s.checkReserve(&r); err != nil {
		return err
	}
	if !b.OK || r.Now.After(b.At) || len(b.Marks) != len(r.Limits) {
		return nil
	}
	s.local.unreserve(&r, b)
	if s.opts.SyncRate < 0 || !s.br.allow(r.Now) {
		return nil
	}
	err := s.unreserveRedis(ctx, &r, b)
	if err == nil {
		s.br.success()
		return nil
	}
	if s.unavailable(ctx, r.Now, err) {
		return nil
	}
	return callerErr(ctx, err)
}

// checkReserve validates r for Reserve and Unreserve and fills its
// defaults.
func (s *Store) checkReserve(r *ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if s.opts.SyncRate > 0 || s.opts.KongLayout || s.opts.EnvoyLayout {
		return fmt.Errorf("redisstore: %w: in periodic, Kong-layout or Envoy-layout mode", ratelimit.ErrReserveUnsupported)
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return err
	}
	if r.Cost < 0 {
		return fmt.Errorf("%w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	r.Cost = max(r.Cost, 1)
	r.Penalty, r.AllowOnly, r.Peek = false, false, false
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	return checkExact(r, r.Cost)
}

// reserveRedis runs reserve.lua for r and checks its answer against
// storekit.Reserve on the counters the script read.
func (s *Store) reserveRedis(ctx context.Context, r *ratelimit.Request, maxDelay time.Duration) (ratelimit.Booking, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	sm, ok := s.mode.(*syncMode)
	if !ok {
		return ratelimit.Booking{}, fmt.Errorf("redisstore: %w: not in synchronous mode", ratelimit.ErrReserveUnsupported)
	}
	rc, err := s.c.conn(ctx)
	if err != nil {
		return ratelimit.Booking{}, err
	}
	n := len(r.Limits)
	keys := make([]string, n)
	for i, l := range r.Limits {
		keys[i] = s.counterKey(r.Key, storekit.CounterID(l))
	}
	args := append([]string{s.nowArg(r.Now), s.minTTL(), itoa(r.Cost), s.maxDelayArg(r.Now, maxDelay)}, sm.plan(r).args[2:]...)
	res, trips := reserveScript.exec(ctx, rc, keys, args)
	s.redisCalls.Add(uint64(trips))
	vals, err := res.ToArray()
	if err != nil {
		return ratelimit.Booking{}, replyErr("reserve.lua", err)
	}
	v, err := int64s(vals)
	if err != nil {
		return ratelimit.Booking{}, fmt.Errorf("%w: reserve.lua: %w", ErrBadReply, err)
	}
	if len(v) != 3+4*n && len(v) != 3+5*n {
		return ratelimit.Booking{}, fmt.Errorf("%w: reserve.lua returned %d values, want %d or %d", ErrBadReply, len(v), 3+4*n, 3+5*n)
	}
	cs := make([]storekit.Counter, n)
	for i := range cs {
		cs[i] = storekit.Counter{Start: v[3+4*i], Cur: v[4+4*i], Prev: v[5+4*i], Next: v[6+4*i]}
	}
	rr := *r
	if !s.opts.CallerClock {
		rr.Now = time.UnixMicro(v[1])
	}
	b := storekit.Reserve(&rr, maxDelay, cs)
	agree := b.OK == (v[0] == 1) && (len(v) == 3+5*n) == b.OK
	for i := 0; agree && b.OK && i < n; i++ {
		agree = b.Marks[i] == v[3+4*n+i]
	}
	if !agree {
		return ratelimit.Booking{}, fmt.Errorf("%w: reserve.lua reserved ok=%v (%v) but storekit.Reserve %+v for %q", ErrBadReply, v[0] == 1, v[3+4*n:], b, r.Key)
	}
	if !s.opts.CallerClock && !b.At.IsZero() {
		b.At = r.Now.Add(b.At.Sub(rr.Now)) // the delay Redis found, on the caller's clock
	}
	return b, nil
}

// maxDelayArg is reserve.lua's bound on the delay, in whole microseconds
// after the script's now, such that it refuses exactly the moments
// storekit.Reserve refuses: those more than maxDelay after now.
func (s *Store) maxDelayArg(now time.Time, maxDelay time.Duration) string {
	if maxDelay >= ratelimit.InfDuration-time.Microsecond {
		return ""
	}
	var frac int64 // the nanoseconds of now below its microsecond, on the caller's clock
	if s.opts.CallerClock {
		frac = now.UnixNano() - floorDiv(now.UnixNano(), 1000)*1000
	}
	return strconv.FormatInt(floorDiv(int64(maxDelay)+frac, 1000), 10)
}

// unreserveRedis runs unreserve.lua for what b took.
func (s *Store) unreserveRedis(ctx context.Context, r *ratelimit.Request, b ratelimit.Booking) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, len(r.Limits))
	args := make([]string, 0, 2+3*len(r.Limits))
	args = append(args, itoa(r.Cost), itoa(int64(len(r.Limits))))
	for i, l := range r.Limits {
		keys[i] = s.counterKey(r.Key, storekit.CounterID(l))
		kind, inc := int64(0), int64(0)
		switch l.Algorithm {
		case ratelimit.SlidingWindow:
			kind = 1
		case ratelimit.TokenBucket:
			kind, inc = 2, int64(mulSat(uint64(r.Cost), emission(&l)))
		}
		args = append(args, itoa(kind), itoa(inc), itoa(b.Marks[i]))
	}
	res, trips := unreserveScript.exec(ctx, rc, keys, args)
	s.redisCalls.Add(uint64(trips))
	if err := res.Error(); err != nil {
		return replyErr("unreserve.lua", err)
	}
	return nil
}

// reserve decides r as a reservation on local counters (LocalOnly, or
// Redis not answering).
func (l *local) reserve(r *ratelimit.Request, maxDelay time.Duration) ratelimit.Booking {
	var b ratelimit.Booking
	l.update(r, true, func(cs []storekit.Counter) { b = storekit.Reserve(r, maxDelay, cs) })
	return b
}

// unreserve gives back what b took from local counters.
func (l *local) unreserve(r *ratelimit.Request, b ratelimit.Booking) {
	l.update(r, false, func(cs []storekit.Counter) { storekit.Unreserve(r, b, cs) })
}

// update hands f the local counters of r's limits, under their shard's
// lock, and keeps what f left in them; with create unset, only in those
// that exist.
func (l *local) update(r *ratelimit.Request, create bool, f func([]storekit.Counter)) {
	sh := l.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ents := make([]*entry, len(r.Limits))
	cs := make([]storekit.Counter, len(r.Limits))
	for i, lim := range r.Limits {
		k := lkey{r.Key, storekit.CounterID(lim)}
		e := sh.m[k]
		if e == nil && create {
			e = &entry{lim: lim}
			sh.m[k] = e
		}
		if e != nil {
			ents[i], cs[i] = e, e.c
		}
	}
	f(cs)
	for i, e := range ents {
		if e != nil {
			e.c = cs[i]
		}
	}
}
