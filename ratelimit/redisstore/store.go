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
// counters: callers never see an error for it. A call cut short by the
// caller's own context (its deadline, its cancellation) is not Redis
// failing: the caller gets an error wrapping ctx.Err(), nothing is decided
// locally and the breaker does not count it. A circuit breaker
// keeps a dead server from being called again until a cool-down has
// passed; state changes are logged once and reported to
// Options.OnStateChange.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	mode    mode
	closed  atomic.Bool

	decisions, localDecisions, redisCalls, redisErrors, syncs atomic.Uint64
	clock                                                     syncClock // see SyncTiming
	// downReason is the reason of the fallback last logged, "" while
	// connected (guarded by br.mu; see logState).
	downReason string
}

var (
	_ ratelimit.Store      = (*Store)(nil)
	_ ratelimit.LeaseStore = (*Store)(nil)
)

// A mode is how a store decides and syncs, chosen by New from SyncRate
// and the layout: localMode, syncMode, periodicMode, kongMode or
// envoyMode. Each keeps its own state and goroutines; the Store keeps what
// they share (client, keys, local counters, breaker, statistics), checks
// requests and hands them over.
type mode interface {
	// take decides r: valid, with Cost and Now set, not a peek. plain
	// reports whether a synchronous store decides it with plain commands
	// (incr.go) rather than take.lua. r is passed by value, so that a
	// mode that does not keep it decides without moving it to the heap.
	take(ctx context.Context, r ratelimit.Request, plain bool) (ratelimit.Decision, error)
	// read returns the counters of r as a decision now would see them,
	// and the time it would be decided at.
	read(ctx context.Context, r *ratelimit.Request) ([]storekit.Counter, time.Time, error)
	// reset deletes the counters of r where other nodes read them (this
	// node's are already gone).
	reset(ctx context.Context, r *ratelimit.Request) error
	// sync runs one cycle at now; see Store.Sync.
	sync(ctx context.Context, now time.Time) error
	// close stops the mode's goroutines and waits for them.
	close()
}

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
		cluster: c.cluster,
	}
	s.clock.opened = time.Now().UnixNano()
	s.br.threshold = int32(opts.FailureThreshold)
	s.br.cooldown = opts.Cooldown
	s.br.onChange = s.stateChanged
	switch {
	case opts.SyncRate < 0:
		s.mode = newLocalMode(s)
	case opts.KongLayout:
		s.mode = newKongMode(s)
	case opts.EnvoyLayout:
		s.mode = newEnvoyMode(s)
	case opts.SyncRate > 0:
		s.mode = newPeriodicMode(s)
	default:
		s.mode = newSyncMode(s)
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

// Take decides r. Being denied is not an error. It returns an error only
// for an invalid request (wrapping ratelimit.ErrInvalidLimit), after Close
// (ratelimit.ErrClosed) or for a reply Redis gave but the store cannot use
// (ErrBadReply), or when ctx ends before Redis answers (an error wrapping
// ctx.Err()). A Redis that does not answer within Options.Timeout is not
// an error: the decision is then made on local counters.
//
// With CallerClock unset and a synchronous sync rate, a request holding a
// token bucket is decided on Redis' clock, not r.Now.
func (s *Store) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	return s.take(ctx, r, nil)
}

// take is Take; plain reports the requests of a synchronous store decided
// with plain commands (incr.go) rather than take.lua: nil for those of
// window limits only (allWindows), or a func returning false to run the
// script's window arithmetic (tests).
func (s *Store) take(ctx context.Context, r ratelimit.Request, plain func(*ratelimit.Request) bool) (ratelimit.Decision, error) {
	if err := s.admit(&r); err != nil {
		return ratelimit.Decision{}, err
	}
	// The peek and the test's plain get copies of r: what they are given
	// goes to the heap, and r stays on the stack on the way to the mode.
	if r.Peek {
		p := r
		return s.peek(ctx, &p)
	}
	windows := allWindows(&r)
	if plain != nil {
		p := r
		windows = plain(&p)
	}
	s.decisions.Add(1)
	return s.mode.take(ctx, r, windows)
}

// admit checks r as Take does and sets its defaults: Cost 1, Now the
// current time, and Penalty in Envoy's layout.
func (s *Store) admit(r *ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if err := ratelimit.ValidateLimits(r.Limits); err != nil {
		return err
	}
	if r.Cost < 0 {
		return fmt.Errorf("%w: cost must not be negative, got %d", ratelimit.ErrInvalidLimit, r.Cost)
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if s.opts.EnvoyLayout {
		if err := checkEnvoy(r.Limits); err != nil {
			return err
		}
		r.Penalty = true
	}
	return nil
}

// TakeAll decides every request of rs as Take does, each on its own:
// ds[i] and errs[i] are what Take(ctx, rs[i]) would return. ds and errs
// must be as long as rs. With a synchronous sync rate the requests go to
// Redis together, in one pipeline, instead of in one round trip each; in
// the other modes they are decided at once, each as by Take.
func (s *Store) TakeAll(ctx context.Context, rs []ratelimit.Request, ds []ratelimit.Decision, errs []error) {
	sm, ok := s.mode.(*syncMode)
	if !ok || sm.batch.queue == nil || len(rs) < 2 || len(rs) > s.opts.MaxBatch {
		s.takeEach(ctx, rs, ds, errs)
		return
	}
	ts := make([]multiTake, len(rs))
	for i := range rs {
		t := &ts[i]
		t.r = rs[i]
		if errs[i] = s.admit(&t.r); errs[i] != nil {
			ds[i], t.done = ratelimit.Decision{}, true
		} else if t.r.Peek {
			// Peeks read with their own script: rare enough (a check
			// that counts nothing) to go the way of Take.
			s.takeEach(ctx, rs, ds, errs)
			return
		}
	}
	for i := range ts {
		if !ts[i].done {
			s.decisions.Add(1)
		}
	}
	sm.takeAll(ctx, ts, ds, errs)
}

// takeEach decides each request of rs with Take, all at once: the last
// on the calling goroutine, the others on their own.
func (s *Store) takeEach(ctx context.Context, rs []ratelimit.Request, ds []ratelimit.Decision, errs []error) {
	var wg sync.WaitGroup
	for i := range len(rs) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[i], errs[i] = s.Take(ctx, rs[i])
		}()
	}
	if n := len(rs) - 1; n >= 0 {
		ds[n], errs[n] = s.Take(ctx, rs[n])
	}
	wg.Wait()
}

// Sync runs one cycle at time now. With SyncRate > 0 it pushes the hits
// counted since the last cycle and pulls the totals of the counters other
// nodes changed (see periodic.syncJournal; in Kong's layout, of every
// counter); in every mode it drops local counters that expired. The store
// runs it every SyncRate unless ManualSync is set.
//
// Hits of a cycle whose push fails are not pushed again (they may have
// reached Redis before the failure), as Kong does; while the store is in
// fallback, hits are kept and pushed by the first cycle after Redis
// returns. A failed cycle returns the error; it is also logged once by the
// state change it causes.
func (s *Store) Sync(ctx context.Context, now time.Time) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	return s.mode.sync(ctx, now)
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
	s.mode.close()
	if s.owns {
		s.c.Close()
	}
	return nil
}
