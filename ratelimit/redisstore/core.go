package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// What the Store keeps for every mode: the client, key building, the
// local counters, the breaker and the fallback to local counters, the
// statistics, and the loop that runs a mode's cycles.

// A loop runs a mode's cycles on a goroutine of its own until close.
type loop struct {
	stop chan struct{}
	done chan struct{}
}

// every returns a loop that runs cycle every interval, each bounded by
// cycleTimeout, or nil with ManualSync.
func (s *Store) every(interval time.Duration, cycle func(ctx context.Context, now time.Time) error) *loop {
	if s.opts.ManualSync {
		return nil
	}
	l := &loop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case now := <-t.C:
				// A cycle bounds its own calls by cycleTimeout: their
				// failures are Redis', not a caller's (see callerErr).
				cycle(context.Background(), now)
			}
		}
	}()
	return l
}

// close stops l and waits for its goroutine; a nil loop has none.
func (l *loop) close() {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
}

// sweep drops the local counters and leases that expired at now: the
// cycle of the modes that do not sync periodically.
func (s *Store) sweep(_ context.Context, now time.Time) error {
	s.local.sweep(now)
	return nil
}

// refused decides r while the breaker keeps Redis away: locally, or with
// Strict not at all.
func (s *Store) refused(r *ratelimit.Request) (ratelimit.Decision, error) {
	if s.opts.Strict {
		return ratelimit.Decision{}, ErrUnavailable
	}
	s.localDecisions.Add(1)
	return s.local.take(r, false), nil
}

// failed decides r after its Redis call, made for a caller whose context
// is ctx, failed with err: locally when Redis was unavailable (with Strict,
// an error wrapping ErrUnavailable), else not at all (see callerErr).
func (s *Store) failed(ctx context.Context, r *ratelimit.Request, err error) (ratelimit.Decision, error) {
	if callerEnded(ctx) != nil || !isUnavailable(err) {
		return ratelimit.Decision{}, callerErr(ctx, err)
	}
	if s.opts.Strict {
		if errors.Is(err, ErrUnavailable) {
			return ratelimit.Decision{}, err
		}
		return ratelimit.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.localDecisions.Add(1)
	return s.local.take(r, false), nil
}

// readResult records the outcome of a read of r's counters in Redis and
// returns what a read gives: cs, or, when Redis was unavailable, this
// node's counters (with Strict, an error wrapping ErrUnavailable).
func (s *Store) readResult(ctx context.Context, r *ratelimit.Request, cs []storekit.Counter, now time.Time, err error) ([]storekit.Counter, time.Time, error) {
	s.record(ctx, r.Now, err)
	if err == nil {
		return cs, now, nil
	}
	if callerEnded(ctx) != nil {
		return nil, time.Time{}, callerErr(ctx, err)
	}
	if isUnavailable(err) && !s.opts.Strict {
		return s.local.counters(r), r.Now, nil
	}
	if isUnavailable(err) && !errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil, time.Time{}, err
}

// del runs in one pipeline the commands cmds builds (deletions of a
// reset), within Timeout, and records the outcome.
func (s *Store) del(ctx context.Context, now time.Time, cmds func(rc rueidis.Client) (rueidis.Commands, error)) error {
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(cctx)
	if err != nil {
		s.record(ctx, now, err)
		return callerErr(ctx, err)
	}
	cs, err := cmds(rc)
	if err != nil {
		return err
	}
	res := rc.DoMulti(cctx, cs...)
	s.redisCalls.Add(1)
	for _, x := range res {
		if err := x.Error(); err != nil {
			err = replyErr("DEL", err)
			s.record(ctx, now, err)
			return callerErr(ctx, err)
		}
	}
	s.record(ctx, now, nil)
	return nil
}

// keysOf returns the Redis keys of r's counters in sluice's layout at
// r.Now: a token bucket's key, or a window's current and previous keys;
// and the start of each window limit's current window (0 for a bucket).
func (s *Store) keysOf(r *ratelimit.Request) (keys []string, starts []int64) {
	nowMs := floorDiv(r.Now.UnixNano(), int64(time.Millisecond))
	starts = make([]int64, len(r.Limits))
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
	return keys, starts
}

// resetKeys returns the keys Reset deletes: those of keysOf, and each
// window's next one, which holds what Reserve took ahead.
func (s *Store) resetKeys(r *ratelimit.Request) []string {
	keys, starts := s.keysOf(r)
	for i, l := range r.Limits {
		if l.Algorithm != ratelimit.TokenBucket {
			w := int64(l.Window / time.Millisecond)
			next, _ := s.windowKeys(r.Key, storekit.CounterID(l), starts[i]+w, w, false)
			keys = append(keys, next)
		}
	}
	return keys
}

// delKeys returns a DEL of each of keys. One DEL per key: on Cluster a
// multi-key DEL must stay in one slot, which a key's counters do, but one
// per key is as cheap in a pipeline and needs no such care.
func delKeys(rc rueidis.Client, keys []string) rueidis.Commands {
	cmds := make(rueidis.Commands, 0, len(keys))
	for _, k := range keys {
		cmds = append(cmds, rc.B().Del().Key(k).Build())
	}
	return cmds
}

func (s *Store) stateChanged(from, to State, err error) {
	s.logState(from, to, err)
	if s.opts.OnStateChange != nil {
		s.opts.OnStateChange(from, to, err)
	}
}

// counterKey returns the Redis key of one counter. The hash tag holds the
// namespace and the key, each length-prefixed, so distinct (namespace,
// key) pairs never share a key and all counters of one key share a Cluster
// slot.
func (s *Store) counterKey(key string, id uint64) string {
	var buf [128]byte
	return string(s.appendCounterKey(buf[:0], key, id))
}

// appendCounterKey appends counterKey(key, id) to b.
func (s *Store) appendCounterKey(b []byte, key string, id uint64) []byte {
	b = append(b, s.tag...)
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(append(append(b, ':'), key...), "}:"...)
	return strconv.AppendUint(b, id, 10)
}

// leaseKey returns the Redis key of the lease set of key.
func (s *Store) leaseKey(key string) string {
	return s.tag + strconv.Itoa(len(key)) + ":" + key + "}:lease"
}

// windowKeys returns the keys of the window of counter (key, id) starting
// at start and, when prev is set, of the window before it, built in one
// allocation.
func (s *Store) windowKeys(key string, id uint64, start, w int64, prev bool) (string, string) {
	var buf [160]byte
	b := s.appendCounterKey(buf[:0], key, id)
	n := len(b)
	b = strconv.AppendInt(append(b, ':'), start, 10)
	if !prev {
		return string(b), ""
	}
	cur := len(b)
	b = append(b, b[:n]...)
	b = strconv.AppendInt(append(b, ':'), start-w, 10)
	both := string(b)
	return both[:cur], both[cur:]
}

// isUnavailable classifies err from a Redis call. A Redis that did not
// answer, or answered that it cannot serve now (LOADING, READONLY after a
// failover, CLUSTERDOWN, OOM at maxmemory...), is unavailable: the caller decides locally.
// Any other error is Redis' answer (ErrBadReply) or the store's state
// (ErrClosed) and goes to the caller.
func isUnavailable(err error) bool {
	if Classify(err) != nil {
		return true
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && !transient(re) {
		return false
	}
	return !errors.Is(err, ErrBadReply) && !errors.Is(err, ratelimit.ErrClosed)
}

// unavailable records the failed call err, made for a caller whose
// context is ctx, with the breaker and reports whether the caller should
// decide locally: never when ctx has ended (see callerErr).
func (s *Store) unavailable(ctx context.Context, now time.Time, err error) bool {
	s.record(ctx, now, err)
	return isUnavailable(err) && callerEnded(ctx) == nil
}

// callerErr is the one rule for a call that failed with err once its
// caller's context ctx had ended (its deadline passed, or it was
// cancelled): the failure is the caller's, not Redis'. It is not counted
// by the breaker (see record), nothing is decided locally, and the caller
// gets an error wrapping ctx.Err(). While ctx is live callerErr returns
// err: a call that the store's own Timeout cut short is Redis' failure.
func callerErr(ctx context.Context, err error) error {
	cerr := callerEnded(ctx)
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("redisstore: %w (%w)", cerr, err)
}

// callerEnded returns ctx's error, or context.DeadlineExceeded once its
// deadline has passed: rueidis times a call out by the deadline, which
// can be a moment before ctx's own timer fires.
func callerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func transient(re *rueidis.RedisError) bool {
	if re.IsLoading() || re.IsClusterDown() || re.IsTryAgain() {
		return true
	}
	msg := re.Error()
	for _, p := range []string{"READONLY", "MASTERDOWN", "NOREPLICAS", "BUSY", "MOVED", "ASK", "OOM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (s *Store) nowArg(now time.Time) string {
	if !s.opts.CallerClock {
		return ""
	}
	return strconv.FormatInt(floorDiv(now.UnixNano(), 1000), 10)
}

// callerClockTTL is the least real time a key lives in Redis when
// decisions use the caller's clock: Redis expires keys by its own clock,
// which then says nothing about the caller's timeline.
const callerClockTTL = time.Hour

// minTTL returns the least time to live of a written key, in ms, as the
// scripts take it.
func (s *Store) minTTL() string {
	if s.opts.CallerClock {
		return itoa(int64(callerClockTTL / time.Millisecond))
	}
	return "0"
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// replyErr wraps the error of a call. An error Redis answered that is not
// about availability nor a Fault (WRONGTYPE, a script error) wraps ErrBadReply;
// anything else (timeouts, refused connections, LOADING...) stays as it is
// for unavailable to classify.
func replyErr(what string, err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) && !transient(re) && Classify(err) == nil {
		return fmt.Errorf("%w: running %s: %w", ErrBadReply, what, err)
	}
	return fmt.Errorf("redisstore: running %s: %w", what, err)
}

// int64s converts an array reply of integers.
func int64s(vals []rueidis.RedisMessage) ([]int64, error) {
	return appendInt64s(make([]int64, 0, len(vals)), vals)
}

// appendInt64s appends the integers of an array reply to dst.
func appendInt64s(dst []int64, vals []rueidis.RedisMessage) ([]int64, error) {
	for i := range vals {
		v, err := vals[i].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("value %d: %w", i, err)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// record feeds the breaker with the outcome of one round trip. A call the
// caller cancelled says nothing about Redis.
func (s *Store) record(ctx context.Context, now time.Time, err error) {
	if err == nil {
		s.br.success()
		return
	}
	if errors.Is(err, context.Canceled) || callerEnded(ctx) != nil {
		return // the caller's, not Redis' (see callerErr)
	}
	s.redisErrors.Add(1)
	if isUnavailable(err) {
		s.br.failure(now, s.c.fault(err))
	} else {
		s.br.success() // Redis answered
	}
}

// followUp returns the context of a call that completes a decision (a
// take-back, a late PEXPIRE): bounded by Timeout, and not cancelled with
// the caller's, since the decision is already made.
func (s *Store) followUp(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
}

// cycleTimeout bounds one sync pipeline: it carries every key of the
// namespace, so it may take longer than one decision's call.
func (s *Store) cycleTimeout() time.Duration { return max(s.opts.Timeout, time.Second) }

// sweepInterval is how often a store that does not sync periodically drops
// expired local counters.
const sweepInterval = 30 * time.Second

// synced records a completed sync cycle run at now.
func (s *Store) synced(now time.Time) {
	s.syncs.Add(1)
	s.clock.lastSync.Store(now.UnixNano())
}
