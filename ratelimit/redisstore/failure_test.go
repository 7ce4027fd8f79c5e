package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// transitions records state changes.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) record(from, to State, _ error) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+">"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.got, " ")
}

func take(t *testing.T, s ratelimit.Store, r ratelimit.Request) ratelimit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), r)
	if err != nil {
		t.Fatalf("Take at %s: %v", r.Now.Sub(ratelimittest.T0), err)
	}
	return d
}

func TestLossAndReturnSynchronous(t *testing.T) {
	srv, c := standalone(t)
	var tr transitions
	var logs bytes.Buffer
	s := newStore(t, c, Options{
		Namespace: "loss", CallerClock: true, ManualSync: true,
		Cooldown: time.Second, OnStateChange: tr.record,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	now := ratelimittest.At(time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}, Now: now}
	for range 6 {
		if !take(t, s, r).Allowed {
			t.Fatal("denied while under the limit")
		}
	}
	// 6 round trips: one pipeline of plain commands per decision.
	if st := s.Stats(); st.RedisCalls != 6 || st.State != StateConnected {
		t.Fatalf("stats %+v, want 6 round trips, connected", st)
	}

	srv.Stop()
	// The next decisions are local, starting from the last totals Redis
	// returned: 4 more pass, the 11th is denied; no error reaches the
	// caller and only the first call tries Redis.
	var calls uint64
	for i := range 4 {
		if i == 1 {
			calls = s.Stats().RedisCalls
		}
		r.Now = now.Add(time.Duration(i+1) * time.Millisecond)
		if !take(t, s, r).Allowed {
			t.Fatalf("local call %d denied", i)
		}
	}
	r.Now = now.Add(10 * time.Millisecond)
	if take(t, s, r).Allowed {
		t.Fatal("11th call allowed: the fallback lost the counts")
	}
	st := s.Stats()
	if st.State != StateFallback || st.RedisCalls != calls || st.RedisErrors != 1 || st.LocalDecisions != 5 {
		t.Fatalf("stats %+v, want fallback after one failed call, then 5 local decisions without calls", st)
	}
	if got := tr.String(); got != "connected>fallback" {
		t.Fatalf("transitions %q", got)
	}

	srv.Restart(t)
	// Within the cool-down Redis is left alone.
	r.Now = now.Add(time.Second)
	calls = s.Stats().RedisCalls
	take(t, s, r)
	if st := s.Stats(); st.RedisCalls != calls {
		t.Fatalf("%d calls during the cool-down, want none", st.RedisCalls-calls)
	}
	// After it one probe reaches the restarted (empty) server and the
	// store is connected again: Redis' count rules.
	r.Now = now.Add(time.Second + 10*time.Millisecond)
	d := take(t, s, r)
	if !d.Allowed || d.State(0).Remaining != 9 {
		t.Fatalf("after return: allowed %v remaining %d, want Redis' fresh count (9 left)", d.Allowed, d.State(0).Remaining)
	}
	if st := s.Stats(); st.State != StateConnected {
		t.Fatalf("state %s after a successful probe", st.State)
	}
	if got := tr.String(); got != "connected>fallback fallback>probing probing>connected" {
		t.Fatalf("transitions %q", got)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "unavailable") || !strings.Contains(lines[1], "available again") {
		t.Fatalf("log lines:\n%s\nwant one for the loss and one for the return", logs.String())
	}
}

func TestDeadlineBoundsEachCall(t *testing.T) {
	// A server that accepts connections but never answers (stopped with
	// SIGSTOP would need signals; a listener that never reads does the
	// same): the call ends at Options.Timeout, not the client's 2 s read
	// timeout, and the decision is local.
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "deadline", CallerClock: true, ManualSync: true, Timeout: 50 * time.Millisecond})
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)}, Now: ratelimittest.At(0)}
	srv.Do(t, "CLIENT", "PAUSE", "3000", "ALL")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := s.Take(ctx, r)
	if err != nil || !d.Allowed {
		t.Fatalf("Take during a paused server: allowed=%v err=%v", d.Allowed, err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call outlived the caller's deadline")
	}
	if st := s.Stats(); st.State != StateFallback || st.LocalDecisions != 1 {
		t.Fatalf("stats %+v, want one local decision in fallback", st)
	}
}

func TestPeriodicSync(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("periodic")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	ctx := context.Background()
	now := ratelimittest.At(5 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}, Now: now}
	for range 4 {
		take(t, a, r)
	}
	for range 3 {
		take(t, b, r)
	}
	// Each node read k once, at its first sight of it; every other
	// decision was local.
	if st := a.Stats(); st.RedisCalls != 1 {
		t.Fatalf("%d Redis calls before any cycle, want 1 (the first sight of k)", st.RedisCalls)
	}
	for _, s := range []*Store{a, b, a} {
		if err := s.Sync(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	key := testWindowKey(a, "k", r.Limits[0], now)
	if got, _ := srv.Do(t, "GET", key).(string); got != "7" {
		t.Fatalf("Redis counter %q, want a count of 7", got)
	}
	for name, s := range map[string]*Store{"a": a, "b": b} {
		if d := take(t, s, r); d.State(0).Remaining != 2 {
			t.Fatalf("node %s: remaining %d after sync, want 2 (7 counted by both nodes, plus this call)", name, d.State(0).Remaining)
		}
	}
	// Node a's read at first sight (one round trip); its first cycle:
	// push (one round trip of plain commands), journal (two: the server
	// did not know journal.lua yet), and, a first cycle having no place in
	// the journal, a read of every counter it holds (one). Its second:
	// journal (one) and a read of the counter node b pushed (one).
	if st := a.Stats(); st.RedisCalls != 7 || st.SyncCycles != 2 {
		t.Fatalf("node a stats %+v: want 7 round trips in 2 cycles", st)
	}
}

func TestPeriodicLossAndReturn(t *testing.T) {
	srv, c := standalone(t)
	var tr transitions
	opts := Options{Namespace: "periodic-loss", CallerClock: true, ManualSync: true, SyncRate: 100 * time.Millisecond, OnStateChange: tr.record}
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	ctx := context.Background()
	now := ratelimittest.At(7 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}, Now: now}
	take(t, a, r)
	if err := a.Sync(ctx, now); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	take(t, a, r) // counted locally, its push fails below
	if err := a.Sync(ctx, now.Add(100*time.Millisecond)); err == nil {
		t.Fatal("sync against a stopped server succeeded")
	}
	if d := take(t, a, r); !d.Allowed || d.State(0).Remaining != 97 {
		t.Fatalf("local decision during the outage: %v remaining %d, want 97", d.Allowed, d.State(0).Remaining)
	}
	srv.Restart(t)
	take(t, b, r)
	// The first cycle after the cool-down (one sync interval) probes,
	// pushes what is waiting and pulls the totals.
	for _, s := range []*Store{a, b, a} {
		if err := s.Sync(ctx, now.Add(200*time.Millisecond)); err != nil {
			t.Fatalf("sync after restart: %v", err)
		}
	}
	key := testWindowKey(a, "k", r.Limits[0], now)
	if got, _ := srv.Do(t, "GET", key).(string); got != "2" {
		t.Fatalf("Redis counter after return %q, want a count of 2 (one hit of each node since the failed cycle)", got)
	}
	if got := tr.String(); got != "connected>fallback fallback>probing probing>connected" {
		t.Fatalf("node a transitions %q", got)
	}
}

func TestSentinelFailover(t *testing.T) {
	sg := testservers.Sentinel(t)
	var nodes []Addr
	for _, a := range sg.Addrs() {
		h, p := splitAddr(t, a)
		nodes = append(nodes, Addr{h, p})
	}
	c := dial(t, Config{SentinelMaster: sg.MasterName, SentinelNodes: nodes})
	s := newStore(t, c, Options{Namespace: "failover", Cooldown: 50 * time.Millisecond, Timeout: 500 * time.Millisecond})
	lim := []ratelimit.Limit{ratelimit.PerSecond(1_000_000)}
	var stop atomic.Bool
	var calls atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for !stop.Load() {
				d, err := s.Take(context.Background(), ratelimit.Request{Key: fmt.Sprint("g", g), Limits: lim})
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					errs <- errors.New("denied far below the limit")
					return
				}
				calls.Add(1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	waitUntil(t, "decisions through redis", func() bool { return s.Stats().RedisCalls > 100 })
	old := sg.MasterAddr(t)
	sg.KillMaster(t)
	newMaster := sg.WaitFailover(t, old)
	if newMaster != sg.Replica.Addr() {
		t.Fatalf("new master %s, want the replica %s", newMaster, sg.Replica.Addr())
	}
	waitUntil(t, "decisions on the new master", func() bool {
		key := testWindowKey(s, "g0", lim[0], time.Now())
		return s.Stats().State == StateConnected && sg.Replica.Do(t, "EXISTS", key) == int64(1)
	})
	before := calls.Load()
	waitUntil(t, "load continuing", func() bool { return calls.Load() > before+100 })
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a caller saw an error during failover: %v", err)
	}
}

// waitUntil polls cond with a bounded deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within 60s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStrict(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "strict", CallerClock: true, ManualSync: true, Strict: true})
	ctx := context.Background()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)}, Now: ratelimittest.At(0)}
	take(t, s, r)
	srv.Stop()
	for i := range 2 { // the failing call, then the open breaker
		if _, err := s.Take(ctx, r); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d: Take = %v, want ErrUnavailable", i, err)
		}
	}
	lr := ratelimit.LeaseRequest{Key: "k", ID: "a", Max: 1, TTL: time.Second, Now: ratelimittest.At(0)}
	if _, err := s.Acquire(ctx, lr); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Acquire = %v, want ErrUnavailable", err)
	}
	if st := s.Stats(); st.LocalDecisions != 0 {
		t.Fatalf("%d local decisions in strict mode", st.LocalDecisions)
	}
}

// A cycle reads with plain GETs the counters others changed, and within
// every sweepEvery every counter the node holds, a shard at a time; a
// value that is not a counter there is a bad reply quoting it, and the
// other counters of the cycle are still merged.
func TestPeriodicPullOfIdleCounters(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("periodic-pull")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	ctx := context.Background()
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}
	for _, k := range []string{"idle", "corrupt"} {
		take(t, a, ratelimit.Request{Key: k, Limits: lim, Now: now})
	}
	if err := a.Sync(ctx, now); err != nil { // pushes both
		t.Fatal(err)
	}
	for range 3 { // another node uses "idle"
		take(t, b, ratelimit.Request{Key: "idle", Limits: lim, Now: now})
	}
	if err := b.Sync(ctx, now); err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "SET", testWindowKey(a, "corrupt", lim[0], now), "12 x 3")
	// "corrupt" was changed behind the journal's back: an ordinary cycle
	// does not read it, the full read does. The cycle runs before the
	// sweep's first step is due, so no shard is swept whichever holds
	// "corrupt" (shards follow the key's seeded hash).
	step := sweepEvery / time.Duration(len(a.local.shards))
	if err := a.Sync(ctx, now.Add(step/2)); err != nil {
		t.Fatalf("cycle reading the counter b changed: %v", err)
	}
	if d := take(t, a, ratelimit.Request{Key: "idle", Limits: lim, Now: now}); d.State(0).Remaining != 5 {
		t.Fatalf("node a: remaining %d on an idle key after a cycle, want 5 (1 + 3 counted, plus this call)", d.State(0).Remaining)
	}
	var err error
	for i := 1; i <= len(a.local.shards) && err == nil; i++ {
		err = a.Sync(ctx, now.Add(time.Duration(i)*step))
	}
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "12 x 3") {
		t.Fatalf("sweep over a corrupt counter: %v, want ErrBadReply quoting the value", err)
	}
}

// A periodic cycle pushes window counts with INCRBY and buckets with
// sync.lua, in one pipeline: both reach the other node.
func TestPeriodicSyncOfBucketsAndWindows(t *testing.T) {
	_, c := standalone(t)
	opts := periodic("periodic-mixed")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10).Sliding(), ratelimit.PerMinute(10).TokenBucket(10)}, Now: now}
	for range 2 {
		take(t, a, r)
		take(t, b, r)
	}
	for _, s := range []*Store{a, b, a} {
		syncAt(t, s, now)
	}
	for name, s := range map[string]*Store{"a": a, "b": b} {
		d := take(t, s, r)
		if got := []int64{d.State(0).Remaining, d.State(1).Remaining}; got[0] != 5 || got[1] != 5 {
			t.Fatalf("node %s: remaining %v after sync, want [5 5] (4 counted by both nodes, plus this call)", name, got)
		}
	}
}

// In periodic mode too, a fixed and a sliding limit of one window share
// one counter: a call is pushed once, and the counter keeps reading its
// previous window for the sliding limit.
func TestPeriodicLimitsOfOneWindowShareACounter(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("periodic-shared")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	t0 := ratelimittest.At(0)
	sliding := ratelimit.PerMinute(10).Sliding()
	for range 8 {
		take(t, a, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{sliding}, Now: t0})
	}
	syncAt(t, a, t0)
	t1 := t0.Add(time.Minute + time.Second)
	both := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{sliding, ratelimit.PerMinute(10).Fixed()}, Now: t1}
	take(t, a, both)
	syncAt(t, a, t1)
	if got := srv.Do(t, "GET", testWindowKey(a, "k", sliding, t1)); got != "1" {
		t.Fatalf("window count %v after one call with both limits, want 1", got)
	}
	// Another node learns both windows: 8 in the previous one weigh
	// 8*59/60 = 7.87, plus the 1 counted, plus this call: 9.87 of 10.
	syncAt(t, b, t1)
	take(t, b, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{sliding}, Now: t1})
	syncAt(t, b, t1)
	if d := take(t, b, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{sliding}, Now: t1}); d.Allowed {
		t.Fatalf("node b: allowed with remaining %d, want denied (previous window 8, current 2)", d.State(0).Remaining)
	}
}

// TakeAll sends its requests in one round trip and, when Redis is lost,
// decides each of them on its local counters, as Take does.
func TestTakeAllLossAndFallback(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "loss-all", CallerClock: true, ManualSync: true, Cooldown: time.Minute})
	now := ratelimittest.At(time.Second)
	rs := []ratelimit.Request{
		{Key: "w", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).Fixed()}, Now: now},
		{Key: "b", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).TokenBucket(3)}, Now: now},
	}
	takeAll := func(step string, want ...bool) {
		t.Helper()
		ds, errs := make([]ratelimit.Decision, len(rs)), make([]error, len(rs))
		s.TakeAll(context.Background(), rs, ds, errs)
		for i := range rs {
			if errs[i] != nil {
				t.Fatalf("%s: request %d: %v", step, i, errs[i])
			}
			if ds[i].Allowed != want[i] {
				t.Fatalf("%s: request %d allowed %v, want %v", step, i, ds[i].Allowed, want[i])
			}
		}
	}
	takeAll("first", true, true)
	calls := s.Stats().RedisCalls
	takeAll("second", true, true)
	if st := s.Stats(); st.RedisCalls != calls+1 {
		t.Fatalf("%d round trips for two requests, want 1", st.RedisCalls-calls)
	}

	srv.Stop()
	// Local from the last totals Redis returned: one more each, then both
	// denied.
	takeAll("first local", true, true)
	takeAll("second local", false, false)
	if st := s.Stats(); st.State != StateFallback || st.LocalDecisions != 4 {
		t.Fatalf("stats %+v, want fallback and 4 local decisions", st)
	}
}

func TestCallerDeadlineIsNotAnOutage(t *testing.T) {
	// A caller whose own deadline passes during a call gets its context's
	// error; the store stays connected and decides nothing locally, so the
	// next caller is decided on Redis' counters, not on local ones that
	// start from zero.
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "caller-deadline", CallerClock: true, ManualSync: true})
	limits := []ratelimit.Limit{ratelimit.PerHour(3).Fixed()}
	r := ratelimit.Request{Key: "k", Limits: limits, Now: ratelimittest.At(0)}
	lr := ratelimit.LeaseRequest{Key: "k", ID: "a", Max: 1, TTL: time.Minute, Now: ratelimittest.At(0)}
	b, err := s.Reserve(context.Background(), r, time.Hour)
	if err != nil || !b.OK {
		t.Fatalf("Reserve: %+v, %v", b, err)
	}
	take(t, s, r)
	take(t, s, r) // the limit is spent on Redis
	if l, err := s.Acquire(context.Background(), lr); err != nil || !l.Allowed {
		t.Fatalf("Acquire: %+v, %v", l, err)
	}

	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	paused := func(name string, call func(ctx context.Context) error) {
		t.Helper()
		// Paused for writes (scripts included), the server holds the call
		// past the caller's deadline, long before the store's own Timeout
		// of 10 s, and still answers the test's UNPAUSE.
		srv.Do(t, "CLIENT", "PAUSE", "10000", "WRITE")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := call(ctx)
		cancel()
		srv.Do(t, "CLIENT", "UNPAUSE")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s past the caller's deadline: err %v, want context.DeadlineExceeded", name, err)
		}
		if err := call(expired); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with an expired context: err %v, want context.DeadlineExceeded", name, err)
		}
		if st := s.Stats(); st.State != StateConnected || st.LocalDecisions != 0 {
			t.Fatalf("after %s: stats %+v, want connected and no local decision", name, st)
		}
	}
	paused("Reserve", func(ctx context.Context) error {
		_, err := s.Reserve(ctx, r, time.Hour)
		return err
	})
	paused("Unreserve", func(ctx context.Context) error {
		return s.Unreserve(ctx, r, b)
	})
	paused("Acquire", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: "b", Max: 1, TTL: time.Minute, Now: ratelimittest.At(0)})
		return err
	})
	if _, err := s.Leases(expired, "k", ratelimittest.At(0)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Leases with an expired context: err %v, want context.DeadlineExceeded", err)
	}
	if d := take(t, s, r); d.Allowed {
		t.Fatal("a call over the limit was allowed after callers' deadlines passed")
	}
	if l, err := s.Acquire(context.Background(), ratelimit.LeaseRequest{Key: "k", ID: "c", Max: 1, TTL: time.Minute, Now: ratelimittest.At(0)}); err != nil || l.Allowed {
		t.Fatalf("a second lease after callers' deadlines passed: %+v, %v", l, err)
	}
}

// TestPeriodicFirstSightReadsRedis: in periodic mode a node that meets a
// key for the first time reads its counters from Redis before deciding, in
// both layouts, so a key other nodes have counted and pushed does not get
// its whole limit again here (the overshoot stays what other nodes admit
// within one cycle). Later decisions of the key are local.
func TestPeriodicFirstSightReadsRedis(t *testing.T) {
	_, c := standalone(t)
	for _, layout := range []string{"sluice", "kong"} {
		t.Run(layout, func(t *testing.T) {
			opts := periodic("first-sight-" + layout)
			opts.KongLayout = layout == "kong"
			a, b := newStore(t, c, opts), newStore(t, c, opts)
			now := ratelimittest.At(5 * time.Second)
			for _, lim := range []ratelimit.Limit{ratelimit.PerMinute(6).Fixed(), ratelimit.PerMinute(6)} {
				key := "k-" + lim.Algorithm.String()
				r := ratelimit.Request{Key: key, Limits: []ratelimit.Limit{lim}, Now: now}
				for i := range 6 {
					if d := take(t, a, r); !d.Allowed {
						t.Fatalf("%v: node a call %d denied", lim, i)
					}
				}
				if err := a.Sync(context.Background(), now); err != nil {
					t.Fatal(err)
				}
				before := b.Stats().RedisCalls
				if d := take(t, b, r); d.Allowed {
					t.Fatalf("%v: node b's first call allowed; node a had used the limit and pushed it", lim)
				}
				take(t, b, r)
				if n := b.Stats().RedisCalls - before; n != 1 {
					t.Errorf("%v: node b made %d Redis calls for two decisions, want 1 (the first sight)", lim, n)
				}
			}
		})
	}
}

// TestPeriodicFirstSightRedisDown: a key first met while Redis is down
// starts from this node's hits; with Strict its decision fails with
// ErrUnavailable instead. A key the node holds is still decided locally.
func TestPeriodicFirstSightRedisDown(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("first-sight-down")
	opts.Timeout = 200 * time.Millisecond
	lenient := newStore(t, c, opts)
	opts.Strict = true
	strict := newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	held := ratelimit.Request{Key: "held", Limits: []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}, Now: now}
	take(t, strict, held)
	srv.Stop()
	fresh := ratelimit.Request{Key: "fresh", Limits: []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}, Now: now}
	for i, want := range []bool{true, true, false} {
		if d := take(t, lenient, fresh); d.Allowed != want {
			t.Fatalf("lenient call %d: allowed %v, want %v (this node's hits)", i, d.Allowed, want)
		}
	}
	if _, err := strict.Take(context.Background(), fresh); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("strict first sight with Redis down: %v, want ErrUnavailable", err)
	}
	if d := take(t, strict, held); !d.Allowed {
		t.Fatal("strict store denied a key it holds; its decisions are local")
	}
}

// TestPeriodicFirstSightConcurrent: many goroutines meeting one key at
// once each count their hit: a first-sight read that returns after
// another one created the counter does not overwrite it.
func TestPeriodicFirstSightConcurrent(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, periodic("first-sight-concurrent"))
	now := ratelimittest.At(5 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1000).Fixed()}, Now: now}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Take(context.Background(), r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if d := take(t, s, r); d.State(0).Remaining != 1000-33 {
		t.Fatalf("remaining %d after 33 calls, want %d", d.State(0).Remaining, 1000-33)
	}
}
