package redisstore

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// dial connects to cfg and closes the client when the test ends.
func dial(t testing.TB, cfg Config) *Client {
	t.Helper()
	c, err := connect(cfg)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// connect returns a client for cfg once it has connected, or the error
// that kept it from connecting.
func connect(cfg Config) (*Client, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// rcOf returns c's connected rueidis client.
func rcOf(t testing.TB, c *Client) rueidis.Client {
	t.Helper()
	rc, err := c.conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func standalone(t testing.TB) (*testservers.RedisServer, *Client) {
	t.Helper()
	srv := testservers.Redis(t, testservers.RedisOptions{})
	return srv, dial(t, Config{Host: srv.Host(), Port: srv.Port()})
}

func cluster(t testing.TB) (*testservers.RedisCluster, *Client) {
	t.Helper()
	cl := testservers.Cluster(t)
	var nodes []Addr
	for _, a := range cl.Addrs() {
		host, port := splitAddr(t, a)
		nodes = append(nodes, Addr{host, port})
	}
	return cl, dial(t, Config{ClusterNodes: nodes})
}

func splitAddr(t testing.TB, a string) (string, int) {
	t.Helper()
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			p, err := strconv.Atoi(a[i+1:])
			if err != nil {
				t.Fatalf("bad address %q", a)
			}
			return a[:i], p
		}
	}
	t.Fatalf("bad address %q", a)
	return "", 0
}

// newStore returns a store over c that the test closes. Unless the test
// sets one, calls get a long deadline: on a busy machine a call must not
// time out and be decided locally where the test expects Redis.
func newStore(t testing.TB, c *Client, opts Options) *Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	s, err := New(c, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var nsSeq atomic.Int64

// factory gives every subtest of the conformance suite a fresh namespace on
// one shared server, so each store starts empty.
func factory(c *Client, opts Options) ratelimittest.Factory {
	return factoryOf(c, opts, false)
}

// factoryOf is factory, with window limits decided by take.lua when
// scriptWindows is set.
func factoryOf(c *Client, opts Options, scriptWindows bool) ratelimittest.Factory {
	return func(t *testing.T) ratelimit.Store {
		o := opts
		// The process id too: should two test processes ever reach one
		// server, their stores still never share counters.
		o.Namespace = "conformance-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(nsSeq.Add(1), 10)
		o.CallerClock = true
		o.ManualSync = true
		// A call slowed down by a busy machine must fail the test, not
		// be decided locally and miscount.
		o.Strict = true
		o.Timeout = 10 * time.Second
		s, err := New(c, o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if scriptWindows {
			return scriptStore{s}
		}
		return s
	}
}

func TestConformanceStandalone(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.Run(t, factory(c, Options{}))
}

// The windows of a request that also has a token bucket go to take.lua,
// whose window arithmetic must agree with storekit.Apply just as well.
func TestConformanceStandaloneScript(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.Run(t, factoryOf(c, Options{}, true))
}

func TestConformanceCluster(t *testing.T) {
	_, c := cluster(t)
	ratelimittest.Run(t, factory(c, Options{}))
}

func TestConformanceLocalOnly(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.Run(t, factory(c, Options{SyncRate: LocalOnly}))
}

func TestRedisHoldsTheCounters(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "ns", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	r := ratelimit.Request{Key: "user:1", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).Fixed()}, Now: ratelimittest.At(0)}
	for i := range 3 {
		d, err := s.Take(ctx, r)
		if err != nil || !d.Allowed {
			t.Fatalf("call %d: %v %v", i, d.Allowed, err)
		}
	}
	// A second store (another node) sees the same count.
	s2 := newStore(t, c, Options{Namespace: "ns", CallerClock: true, ManualSync: true})
	if d, err := s2.Take(ctx, r); err != nil || d.Allowed {
		t.Fatalf("fourth call on another node: allowed=%v err=%v", d.Allowed, err)
	}
	// One key per window, named by its start, holding the count.
	key := s.counterKey("user:1", storekit.CounterID(r.Limits[0])) + ":" + strconv.FormatInt(ratelimittest.T0.UnixMilli(), 10)
	if got := srv.Do(t, "GET", key); got != "3" {
		t.Fatalf("GET %s = %v, want 3", key, got)
	}
	// Two windows would do by Redis' clock; with the caller's clock keys
	// live at least callerClockTTL of real time.
	if ttl, _ := srv.Do(t, "PTTL", key).(int64); ttl <= 3_500_000 || ttl > 3_600_000 {
		t.Fatalf("PTTL = %d ms, want about an hour", ttl)
	}
}

// testWindowKey returns the Redis key of the window of limit l (fixed or
// sliding) of key that contains now.
func testWindowKey(s *Store, key string, l ratelimit.Limit, now time.Time) string {
	w := l.Window.Milliseconds()
	ms := now.UnixMilli()
	cur, _ := s.windowKeys(key, storekit.CounterID(l), ms-ms%w, w, false)
	return cur
}

// Every window key gets a time to live: from the first node that counts
// in it, and again when a key this node already gave one is created anew
// (evicted, or lost in a restart) by its INCRBY.
func TestWindowKeysAlwaysExpire(t *testing.T) {
	srv, c := standalone(t)
	for _, opts := range []Options{
		{Namespace: "ttl-sync", CallerClock: true, ManualSync: true},
		{Namespace: "ttl-periodic", CallerClock: true, ManualSync: true, SyncRate: 100 * time.Millisecond},
	} {
		s := newStore(t, c, opts)
		now := ratelimittest.At(0)
		r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(100)}, Now: now}
		key := testWindowKey(s, "k", r.Limits[0], now)
		for i := range 3 {
			take(t, s, r)
			if err := s.Sync(context.Background(), now); err != nil {
				t.Fatal(err)
			}
			if ttl, _ := srv.Do(t, "PTTL", key).(int64); ttl <= 3_500_000 {
				t.Fatalf("%s, call %d: PTTL %s = %d ms, want about an hour", opts.Namespace, i, key, ttl)
			}
			srv.Do(t, "DEL", key) // gone: the next INCRBY creates it again
		}
	}
}

// A fixed and a sliding limit of one window share one counter, as in Kong
// and in every other store: a call is counted once, whichever path
// decides it.
func TestLimitsOfOneWindowShareACounter(t *testing.T) {
	srv, c := standalone(t)
	for _, script := range []bool{false, true} {
		s := newStore(t, c, Options{Namespace: "shared-" + strconv.FormatBool(script), CallerClock: true, ManualSync: true})
		st := via(s, script)
		now := ratelimittest.At(0)
		r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(5).Fixed(), ratelimit.PerMinute(5).Sliding()}, Now: now}
		for i := range 5 {
			if d := take(t, st, r); !d.Allowed {
				t.Fatalf("script=%v: call %d denied under the limit", script, i)
			}
		}
		if d := take(t, st, r); d.Allowed {
			t.Fatalf("script=%v: sixth call allowed", script)
		}
		if got := srv.Do(t, "GET", testWindowKey(s, "k", r.Limits[0], now)); got != "5" {
			t.Fatalf("script=%v: shared count %v, want 5", script, got)
		}
	}
}

// take.lua reports a foreign value under a window key it was to count in,
// naming the key, and leaves it as it was.
func TestScriptLeavesAForeignWindowKey(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "foreign", CallerClock: true, ManualSync: true})
	now := ratelimittest.At(0)
	lim := []ratelimit.Limit{ratelimit.PerMinute(5), ratelimit.PerMinute(5).TokenBucket(5)}
	key := testWindowKey(s, "k", lim[0], now)
	srv.Do(t, "HSET", key, "f", "v")
	_, err := s.Take(context.Background(), ratelimit.Request{Key: "k", Limits: lim, Now: now})
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Take over a hash: %v, want ErrBadReply naming WRONGTYPE and %s", err, key)
	}
	if typ, _ := srv.Do(t, "TYPE", key).(string); typ != "hash" {
		t.Fatalf("the foreign key became a %s", typ)
	}
	if n := srv.Do(t, "EXISTS", s.counterKey("k", storekit.CounterID(lim[1]))); n != int64(0) {
		t.Fatal("the failed request's bucket was written")
	}
}

// A count below zero, which a take-back leaves when it lands after its key
// vanished, counts as zero and still gets a time to live.
func TestNegativeCountsCountAsZero(t *testing.T) {
	srv, c := standalone(t)
	for _, script := range []bool{false, true} {
		s := newStore(t, c, Options{Namespace: "negative-" + strconv.FormatBool(script), CallerClock: true, ManualSync: true})
		st := via(s, script)
		now := ratelimittest.At(time.Minute)
		r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).Sliding()}, Now: now}
		take(t, st, r) // this node has given the window its expiry
		cur := testWindowKey(s, "k", r.Limits[0], now)
		srv.Do(t, "SET", testWindowKey(s, "k", r.Limits[0], now.Add(-time.Minute)), "-7")
		srv.Do(t, "SET", cur, "-2") // no time to live, as DECRBY makes it
		d := take(t, st, r)
		if !d.Allowed || d.State(0).Remaining != 2 {
			t.Fatalf("script=%v: allowed=%v remaining %d, want allowed with 2 left (negative counts are zero)", script, d.Allowed, d.State(0).Remaining)
		}
		if ttl, _ := srv.Do(t, "PTTL", cur).(int64); ttl <= 0 {
			t.Fatalf("script=%v: PTTL %d: a recreated window key was left without an expiry", script, ttl)
		}
	}
}

// A sliding window's previous count is read until it is final (a tenth
// of the window in, at most a second); then a node that has read it keeps
// it, and its decisions send no GET, while the current window stays
// shared with the other nodes.
func TestFinalPreviousWindowIsReadOnce(t *testing.T) {
	srv, c := standalone(t)
	opts := Options{Namespace: "prev-final", CallerClock: true, ManualSync: true}
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	lim := []ratelimit.Limit{ratelimit.PerMinute(10).Sliding()}
	t0 := ratelimittest.At(0)
	for range 5 {
		take(t, b, ratelimit.Request{Key: "k", Limits: lim, Now: t0})
	}
	getsAt := func(s *Store, at time.Duration) int {
		before := gets(t, srv)
		take(t, s, ratelimit.Request{Key: "k", Limits: lim, Now: t0.Add(time.Minute + at)})
		return gets(t, srv) - before
	}
	// A minute's window has a grace of a second: read each time before.
	for _, at := range []time.Duration{100 * time.Millisecond, 999 * time.Millisecond} {
		if n := getsAt(a, at); n != 1 {
			t.Fatalf("decision at +%s: %d GETs, want 1 (the previous window may still change)", at, n)
		}
	}
	if n := getsAt(a, time.Second); n != 1 {
		t.Fatalf("first decision past the grace: %d GETs, want 1", n)
	}
	for _, at := range []time.Duration{2 * time.Second, 30 * time.Second} {
		if n := getsAt(a, at); n != 0 {
			t.Fatalf("decision at +%s: %d GETs, want 0 (the final count is known)", at, n)
		}
	}
	// b counts in the current window too: a sees it, and still weighs
	// the previous window's 5. At +54 s: 5 x 6/60 = 0.5, plus 5 counted
	// by a, 3 by b, and this call: 9.5 of 10; the next call is denied.
	for range 3 {
		take(t, b, ratelimit.Request{Key: "k", Limits: lim, Now: t0.Add(time.Minute + 40*time.Second)})
	}
	at := t0.Add(time.Minute + 54*time.Second)
	if d := take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: at}); !d.Allowed {
		t.Fatal("denied at 9.5 of 10")
	}
	if d := take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: at}); d.Allowed {
		t.Fatal("allowed at 10.5 of 10: the previous window or b's calls were not counted")
	}
}

// scriptStore is a Store whose window limits are decided by take.lua, as
// in a request that also holds a token bucket, so that tests run the
// script's window arithmetic.
type scriptStore struct{ *Store }

func (s scriptStore) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	return s.take(ctx, r, func(*ratelimit.Request) bool { return false })
}

// via returns s, or s deciding window limits with take.lua when script is
// set.
func via(s *Store, script bool) ratelimit.Store {
	if script {
		return scriptStore{s}
	}
	return s
}
