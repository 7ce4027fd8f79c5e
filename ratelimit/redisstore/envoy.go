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

// envoyproxy/ratelimit's layout (docs/redis.md, "envoyproxy/ratelimit
// interop"), used with Options.EnvoyLayout: the count of a fixed window is
// a plain integer under "<Request.Key><window start in Unix seconds>",
// incremented with INCRBY and given one window to live with EXPIRE, the
// two pipelined, as envoyproxy/ratelimit writes it. As there, every call
// is counted, a denied one too (Request.Penalty is implied), so nothing
// is ever taken back. A check (Request.Peek) reads the count with GET.

// envoyMode is the mode of Options.EnvoyLayout, synchronous: every
// decision in Redis (takeEnvoy). Its goroutine is the loop that drops
// expired local counters.
type envoyMode struct {
	*Store
	loop *loop
}

func newEnvoyMode(st *Store) *envoyMode {
	return &envoyMode{Store: st, loop: st.every(sweepInterval, st.sweep)}
}

func (s *envoyMode) take(ctx context.Context, rv ratelimit.Request, _ bool) (ratelimit.Decision, error) {
	r := &rv
	if !s.br.allow(r.Now) {
		return s.refused(r)
	}
	d, err := s.takeEnvoy(ctx, r)
	if err != nil {
		return s.failed(ctx, r, err)
	}
	return d, nil
}

func (s *envoyMode) read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error) {
	if !s.br.allow(r.Now) {
		return s.local.counters(r), r.Now, nil
	}
	cs, err := s.readEnvoy(ctx, r)
	return s.readResult(ctx, r, cs, r.Now, err)
}

func (s *envoyMode) reset(ctx context.Context, r *ratelimit.Request) error {
	return s.del(ctx, r.Now, func(rc rueidis.Client) (rueidis.Commands, error) {
		if err := checkEnvoy(r.Limits); err != nil {
			return nil, err
		}
		key, _ := envoyWindow(r)
		return rueidis.Commands{rc.B().Del().Key(key).Build()}, nil
	})
}

func (s *envoyMode) sync(ctx context.Context, now time.Time) error { return s.sweep(ctx, now) }

func (s *envoyMode) close() { s.loop.close() }

// checkEnvoy reports limits the layout cannot hold: anything but one fixed
// window of whole seconds.
func checkEnvoy(ls []ratelimit.Limit) error {
	if len(ls) != 1 || ls[0].Algorithm != ratelimit.FixedWindow || ls[0].Window%time.Second != 0 {
		return fmt.Errorf("%w: envoyproxy/ratelimit's redis layout holds one fixed window of whole seconds per key, got %v", ratelimit.ErrInvalidLimit, ls)
	}
	return nil
}

// envoyWindow returns the Redis key of r's window at r.Now and the
// window's start in Unix seconds.
func envoyWindow(r *ratelimit.Request) (string, int64) {
	w := int64(r.Limits[0].Window / time.Second)
	start := floorDiv(r.Now.Unix(), w) * w
	var buf [128]byte
	return string(strconv.AppendInt(append(buf[:0], r.Key...), start, 10)), start
}

// takeEnvoy decides r in envoyproxy/ratelimit's layout: one pipeline of
// INCRBY and EXPIRE, and storekit.Apply over the count before this call.
func (s *envoyMode) takeEnvoy(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		s.record(ctx, r.Now, err)
		return ratelimit.Decision{}, err
	}
	key, start := envoyWindow(r)
	w := int64(r.Limits[0].Window / time.Second)
	res, trips := doMulti(cctx, rc, 2, func(i int) rueidis.Completed {
		if i == 0 {
			return rc.B().Incrby().Key(key).Increment(r.Cost).Build()
		}
		return rc.B().Expire().Key(key).Seconds(w).Build()
	})
	s.redisCalls.Add(uint64(trips))
	after, err := res[0].AsInt64()
	if err == nil {
		err = res[1].Error()
	}
	if err != nil {
		err = replyErr("INCRBY/EXPIRE "+key, err)
		s.record(ctx, r.Now, err)
		return ratelimit.Decision{}, err
	}
	s.record(ctx, r.Now, nil)
	cs := []storekit.Counter{{Start: start * 1000, Cur: max(after-r.Cost, 0)}}
	d := storekit.Apply(r, cs)
	s.local.put(r, cs, nil, nil)
	return d, nil
}

// readEnvoy reads the counter of r in envoyproxy/ratelimit's layout.
func (s *envoyMode) readEnvoy(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		return nil, err
	}
	key, start := envoyWindow(r)
	res, trips := do(ctx, rc, func() rueidis.Completed { return rc.B().Get().Key(key).Build() })
	s.redisCalls.Add(uint64(trips))
	n, err := readCount(res, key)
	if err != nil {
		return nil, err
	}
	return []storekit.Counter{{Start: start * 1000, Cur: max(n, 0)}}, nil
}
