// Package redisstore is a ratelimit.Store that shares counters between
// nodes through Redis (standalone, Sentinel or Cluster).
//
// Every window count is one integer key per window, changed with INCRBY:
// a request of window limits is decided with a few pipelined plain
// commands (see incr.go), exactly (a call is admitted only if its own
// INCRBY left the count within the limit). Token buckets are decided
// atomically by an embedded Lua script, all limits of one key in one
// round trip, with the integer math of storekit.Apply. Concurrent
// decisions are batched into one pipeline (one script call per Cluster
// slot) and share a few connections through rueidis' automatic
// pipelining, so one Redis shard is not held to one script call or one
// socket write per request.
//
// A Store is one namespace over a shared Client:
//
//	c, err := redisstore.NewClient(redisstore.Config{Host: "127.0.0.1", Port: 6379})
//	...
//	s, err := redisstore.New(c, redisstore.Options{Namespace: "api"})
//	...
//	d, err := s.Take(ctx, ratelimit.Request{Key: "user:1", Limits: limits})
//
// The sync rate chooses how often Redis is consulted, as Kong's sync_rate
// does: never (LocalOnly), on every decision (0, the default), or
// periodically (> 0), counting locally in between and pushing all hits of a
// cycle in one pipeline.
//
// The client connects on first use: a store built while Redis is down
// decides from its first call. When Redis does not answer within
// Options.Timeout (connecting included), decisions fall back to local
// counters: callers never see an error for it. A circuit breaker
// keeps a dead server from being called again until a cool-down has
// passed; state changes are logged once and reported to
// Options.OnStateChange.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// LocalOnly is the SyncRate that never consults Redis (Kong's sync_rate -1).
const LocalOnly time.Duration = -1

// ErrBadReply wraps every error about a reply the store cannot use: a reply
// of the wrong shape, a Redis error such as WRONGTYPE (a foreign value
// under one of the store's keys), or a script that disagrees with
// storekit.Apply.
var ErrBadReply = errors.New("redisstore: bad reply from redis")

// ErrUnavailable is returned, with Options.Strict, instead of a local
// decision when Redis does not answer or the breaker keeps it away.
var ErrUnavailable = errors.New("redisstore: redis unavailable")

// Options configures a Store. The zero value is a synchronous store in the
// empty namespace that reads Redis' clock.
type Options struct {
	// Namespace separates counters of different policies sharing one Redis
	// (Kong's namespace). Two stores with the same namespace share their
	// counters.
	Namespace string
	// Prefix starts every Redis key; empty means "sluice".
	Prefix string

	// SyncRate is Kong's sync_rate as a duration. LocalOnly (or any
	// negative value) keeps counters in this process only; zero consults
	// Redis on every decision; a positive value counts locally and, once
	// per SyncRate, pushes the hits of the keys used since the last cycle
	// and pulls back the totals other nodes changed (see Sync).
	SyncRate time.Duration
	// ManualSync runs no background goroutine: the caller runs Sync, which
	// pushes and pulls (with SyncRate > 0) and drops expired local
	// counters. Tests use it to run cycles deterministically.
	ManualSync bool

	// CallerClock decides with Request.Now (and LeaseRequest.Now) instead
	// of Redis' TIME in the scripts (token buckets, leases). By default the
	// scripts read Redis' clock, one clock for every node, while window
	// limits always take their window from the decision's time (Request.Now,
	// or the node's clock when it is zero), as Kong does. The caller's clock
	// makes decisions reproducible in tests. Redis still expires keys by its
	// own clock, so with CallerClock every key is kept at least an hour of
	// real time.
	CallerClock bool

	// KongLayout keeps window counters in Kong's Redis layout (one hash per
	// window and namespace, "<window_start>:<W>:<namespace>", field = key),
	// so that sluice and Kong nodes with the same namespace share counters.
	// It holds fixed and sliding windows of whole seconds only (a token
	// bucket limit is an invalid request), decides with plain commands
	// instead of one atomic script (see docs/redis.md), puts a whole
	// namespace in one Cluster slot, and takes window starts from the
	// node's clock. Leases keep sluice's own keys.
	KongLayout bool

	// EnvoyLayout keeps window counters in envoyproxy/ratelimit's Redis
	// layout: the count of a window is a plain integer under Request.Key
	// followed by the window's start in Unix seconds, expiring one window
	// later, so that sluice and envoyproxy/ratelimit nodes continue each
	// other's counters. The caller builds the key (envoyproxy/ratelimit's
	// "<prefix><domain>_<key>_<value>_"); Namespace and Prefix are not
	// used. It holds one fixed window of whole seconds per request (other
	// limits are an invalid request), counts a denied call too
	// (Request.Penalty is implied), as envoyproxy/ratelimit does, and takes
	// window starts from the decision's time. It needs a synchronous
	// SyncRate (zero) or LocalOnly.
	EnvoyLayout bool

	// MaxBatch is the largest number of synchronous decisions sent in one
	// batch (one pipeline; one take.lua call per slot for those that need
	// the script); zero means 128. 1 sends every decision on its own
	// (still pipelined with the others on a shared connection).
	MaxBatch int
	// Batchers is the number of batches in flight at once; zero means 2.
	// Fewer batchers make larger batches, and so fewer socket writes per
	// decision; two keep one batch filling while one is on the wire.
	Batchers int

	// Timeout bounds every Redis call, below the caller's own deadline;
	// zero means 200 ms. A decision whose call does not return in time is
	// decided locally.
	Timeout time.Duration
	// FailureThreshold is the number of consecutive failed calls that
	// switch the store to local counters; zero means 1.
	FailureThreshold int
	// Cooldown is how long the store keeps away from a failed Redis before
	// one call probes it again; zero means 1 s, or SyncRate when SyncRate
	// is positive (every cycle probes).
	Cooldown time.Duration

	// Strict returns an error wrapping ErrUnavailable instead of deciding
	// locally when Redis is unavailable (Take in synchronous mode, Acquire
	// unless LocalOnly), for callers that choose their own failure mode, and for tests
	// that must tell a slow Redis from a miscount. The default is Kong's:
	// fall back to local counters, never fail the caller.
	Strict bool

	// Logger receives one line per state change; nil discards them.
	Logger *slog.Logger
	// SettingName names a Config field (a Fault's Setting) in the error
	// logged for a configuration fault, as the user set it (an environment
	// variable, say); nil names it "config.redis.FIELD".
	SettingName func(field string) string
	// OnStateChange, when set, is called once per state change, in order,
	// with the error that caused a switch to fallback. It must not block:
	// it runs while the store's breaker is locked.
	OnStateChange func(from, to State, err error)
}

// batching is the state of synchronous decisions: the calls waiting for
// a batcher (nil with MaxBatch 1, or in another mode) and the calls and
// batches out.
type batching struct {
	queue    chan *takeCall
	inflight atomic.Int64
}

// cycle is the periodic cycle's place in the namespace's journal,
// guarded by mu (which serializes cycles): the sequence number and epoch
// of its last journal call (cursor -1: none), whether the next cycle must
// read every counter, the local shard the sweep reads next and when, and
// pushes a failed journal call left to record.
type cycle struct {
	mu          sync.Mutex
	cursor      int64
	epoch       string
	readAll     bool
	sweep       int
	nextSweep   time.Time
	unjournaled []string
}

// Store is a ratelimit.Store backed by Redis. Create it with New over a
// shared Client, or with Open over a client of its own; it is safe for
// concurrent use. Closing a store from New stops its goroutines but not
// the Client, which other stores may share.
type Store struct {
	c      *Client
	owns   bool // Close closes c (Open)
	opts   Options
	tag    string // prefix + ":{" + length-prefixed namespace
	local  *local
	br     breaker
	logger *slog.Logger

	cluster bool
	batch   batching // synchronous mode (batch.go)
	cycle   cycle    // periodic mode (sync.go)

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup

	decisions, localDecisions, redisCalls, redisErrors, syncs atomic.Uint64
	clock                                                     syncClock // see SyncTiming
	// downReason is the reason of the fallback last logged, "" while
	// connected (guarded by br.mu; see logState).
	downReason string

	// plans caches take.lua plans by planKey (see plan).
	plans  sync.Map
	nplans atomic.Int64
}

var (
	_ ratelimit.Store      = (*Store)(nil)
	_ ratelimit.LeaseStore = (*Store)(nil)
)

// New returns a store for one namespace over c. Stores are cheap: create
// one per namespace and share the Client.
//
// With SyncRate > 0 and ManualSync unset, or SyncRate <= 0, a goroutine
// owned by the store runs sync cycles or drops expired local counters;
// Close stops it.
func New(c *Client, opts Options) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrConfig)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 200 * time.Millisecond
	}
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = 1
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = time.Second
		if opts.SyncRate > 0 {
			// A cycle is one pipeline per SyncRate: probing on every cycle
			// does not hammer Redis, and resyncs within one interval.
			opts.Cooldown = opts.SyncRate
		}
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 128
	}
	if opts.Batchers <= 0 {
		opts.Batchers = 2
	}
	if opts.Prefix == "" {
		opts.Prefix = "sluice"
	}
	if opts.SyncRate < 0 {
		opts.SyncRate = LocalOnly
	}
	if opts.EnvoyLayout && (opts.KongLayout || opts.SyncRate > 0) {
		return nil, fmt.Errorf("%w: EnvoyLayout needs a synchronous SyncRate and no KongLayout", ErrConfig)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		c:       c,
		opts:    opts,
		tag:     opts.Prefix + ":{" + strconv.Itoa(len(opts.Namespace)) + ":" + opts.Namespace,
		local:   newLocal(),
		logger:  logger,
		stop:    make(chan struct{}),
		cluster: c.cluster,
	}
	s.cycle.cursor = -1
	s.clock.opened = time.Now().UnixNano()
	s.br.threshold = int32(opts.FailureThreshold)
	s.br.cooldown = opts.Cooldown
	s.br.onChange = s.stateChanged
	if !opts.ManualSync {
		s.wg.Add(1)
		go s.loop()
	}
	if opts.SyncRate == 0 && opts.MaxBatch > 1 && !opts.KongLayout && !opts.EnvoyLayout {
		s.batch.queue = make(chan *takeCall, opts.MaxBatch*opts.Batchers)
		for range opts.Batchers {
			s.wg.Add(1)
			go s.batcher()
		}
	}
	return s, nil
}

// Open returns a store for one namespace over a client of its own for
// cfg, which Close closes: for a process that opens one namespace. Like
// NewClient, it fails only for an unusable config or options, never
// because Redis is down.
func Open(cfg Config, opts Options) (*Store, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	s, err := New(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.owns = true
	return s, nil
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

// emission returns a token bucket's emission interval in microseconds,
// W/Count rounded up and at least 1, as storekit.Apply computes it.
func emission(l *ratelimit.Limit) uint64 {
	wUs := uint64(l.Window / time.Microsecond)
	c := uint64(l.Count)
	return max((wUs+c-1)/c, 1)
}

// mulSat returns a*b, saturating at MaxUint64.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// Take decides r. Being denied is not an error. It returns an error only
// for an invalid request (wrapping ratelimit.ErrInvalidLimit), after Close
// (ratelimit.ErrClosed) or for a reply Redis gave but the store cannot use
// (ErrBadReply). A Redis that does not answer is not an error: the
// decision is then made on local counters.
//
// With CallerClock unset and a synchronous sync rate, a request holding a
// token bucket is decided on Redis' clock, not r.Now.
func (s *Store) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	return s.take(ctx, r, allWindows)
}

// take is Take; plain reports the requests of a synchronous store decided
// with plain commands (incr.go) rather than take.lua: those of window
// limits only, or none to run the script's window arithmetic (tests).
func (s *Store) take(ctx context.Context, r ratelimit.Request, plain func(*ratelimit.Request) bool) (ratelimit.Decision, error) {
	if s.closed.Load() {
		return ratelimit.Decision{}, ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return ratelimit.Decision{}, err
	}
	if r.Cost < 0 {
		return ratelimit.Decision{}, fmt.Errorf("%w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if s.opts.EnvoyLayout {
		if err := checkEnvoy(r.Limits); err != nil {
			return ratelimit.Decision{}, err
		}
		r.Penalty = true
	}
	if r.Peek {
		return s.peek(ctx, &r)
	}
	s.decisions.Add(1)
	switch {
	case s.opts.SyncRate < 0:
		return s.local.take(&r, false), nil
	case s.opts.SyncRate > 0:
		if s.opts.KongLayout {
			if err := checkKong(r.Limits); err != nil {
				return ratelimit.Decision{}, err
			}
		}
		return s.local.take(&r, true), nil
	}
	windows := plain(&r)
	if s.opts.KongLayout {
		if err := checkKong(r.Limits); err != nil {
			return ratelimit.Decision{}, err
		}
	} else if !windows && !s.opts.EnvoyLayout {
		if err := checkExact(&r, r.Cost); err != nil {
			return ratelimit.Decision{}, err
		}
	}
	if !s.br.allow(r.Now) {
		if s.opts.Strict {
			return ratelimit.Decision{}, ErrUnavailable
		}
		s.localDecisions.Add(1)
		return s.local.take(&r, false), nil
	}
	var d ratelimit.Decision
	var err error
	switch {
	case s.opts.KongLayout:
		d, err = s.takeKong(ctx, &r)
	case s.opts.EnvoyLayout:
		d, err = s.takeEnvoy(ctx, &r)
	case windows:
		d, err = s.takeIncr(ctx, &r)
	default:
		d, err = s.takeRedis(ctx, &r)
	}
	if err == nil {
		return d, nil
	}
	if isUnavailable(err) {
		if s.opts.Strict {
			if errors.Is(err, ErrUnavailable) {
				return ratelimit.Decision{}, err
			}
			return ratelimit.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.localDecisions.Add(1)
		return s.local.take(&r, false), nil
	}
	return ratelimit.Decision{}, err
}

// isUnavailable classifies err from a Redis call. A Redis that did not
// answer, or answered that it cannot serve now (LOADING, READONLY after a
// failover, CLUSTERDOWN...), is unavailable: the caller decides locally.
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

// unavailable records the failed call err with the breaker and reports
// whether the caller should decide locally.
func (s *Store) unavailable(now time.Time, err error) bool {
	s.record(now, err)
	return isUnavailable(err)
}

func transient(re *rueidis.RedisError) bool {
	if re.IsLoading() || re.IsClusterDown() || re.IsTryAgain() {
		return true
	}
	msg := re.Error()
	for _, p := range []string{"READONLY", "MASTERDOWN", "NOREPLICAS", "BUSY", "MOVED", "ASK"} {
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

// takeRedis decides r with take.lua, in a batch with other concurrent
// decisions unless MaxBatch is 1, and rebuilds the decision with
// storekit.Apply from the counters the script read.
func (s *Store) takeRedis(ctx context.Context, r *ratelimit.Request) (ratelimit.Decision, error) {
	c := newCall()
	c.keys = make([]string, len(r.Limits))
	for i, l := range r.Limits {
		c.keys[i] = s.counterKey(r.Key, storekit.CounterID(l))
	}
	c.plan, c.nowArg, c.n, c.now = s.plan(r), s.nowArg(r.Now), len(r.Limits), r.Now
	if s.cluster {
		c.slot = slot(c.keys[0])
	}
	res, answered := s.submit(ctx, c)
	if answered {
		free(c)
	}
	if res.err != nil {
		return ratelimit.Decision{}, res.err
	}
	return s.decodeTake(r, res.vals)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

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
func (s *Store) plan(r *ratelimit.Request) *takePlan {
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

// Acquire takes or renews one concurrency lease. Leases are decided in
// Redis whatever the sync rate (except LocalOnly): a bound on concurrent
// holders is only worth having if it is shared. When Redis does not answer
// the lease is decided locally.
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
	if s.unavailable(r.Now, err) {
		if s.opts.Strict {
			return ratelimit.Lease{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.localDecisions.Add(1)
		return s.local.acquire(&r), nil
	}
	return ratelimit.Lease{}, err
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
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rc, err := s.c.conn(ctx)
	if err != nil {
		s.unavailable(time.Now(), err)
		return nil
	}
	res, trips := do(ctx, rc, func() rueidis.Completed { return rc.B().Zrem().Key(s.leaseKey(key)).Member(id).Build() })
	s.redisCalls.Add(uint64(trips))
	err = res.Error()
	if err == nil {
		s.br.success()
		return nil
	}
	err = replyErr("ZREM", err)
	if s.unavailable(time.Now(), err) {
		return nil
	}
	return err
}

// Stats are counters of a store's activity since New, for export as
// metrics. Every field only grows, except State and Keys.
type Stats struct {
	// State is the store's view of Redis now.
	State State
	// Decisions counts Take calls that were decided.
	Decisions uint64
	// LocalDecisions counts Take and Acquire calls decided on local
	// counters because Redis was unavailable (not those of LocalOnly or
	// periodic mode, which are local by design).
	LocalDecisions uint64
	// RedisCalls counts round trips to Redis: one per decision in
	// synchronous mode (two when a script had to be loaded), up to three
	// pipelines per sync cycle (push, journal, pull).
	RedisCalls uint64
	// RedisErrors counts failed round trips.
	RedisErrors uint64
	// SyncCycles counts completed sync cycles (SyncRate > 0).
	SyncCycles uint64
	// Keys is the number of counters held locally.
	Keys int
}

// Stats returns the store's counters. It is safe to call at any time and
// costs a pass over the local shards for Keys.
func (s *Store) Stats() Stats {
	return Stats{
		State:          State(s.br.state.Load()),
		Decisions:      s.decisions.Load(),
		LocalDecisions: s.localDecisions.Load(),
		RedisCalls:     s.redisCalls.Load(),
		RedisErrors:    s.redisErrors.Load(),
		SyncCycles:     s.syncs.Load(),
		Keys:           s.local.size(),
	}
}

// Close stops the store's goroutines and waits for them. Later calls
// return ratelimit.ErrClosed. A store from New leaves its Client open; a
// store from Open closes its own.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	if s.owns {
		s.c.Close()
	}
	return nil
}
