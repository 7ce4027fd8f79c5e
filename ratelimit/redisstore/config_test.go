package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

func oneTake(t *testing.T, c *Client) ratelimit.Decision {
	t.Helper()
	s := newStore(t, c, Options{Namespace: "cfg", CallerClock: true, ManualSync: true})
	return take(t, s, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(5)}, Now: ratelimittest.At(0)})
}

func TestTLS(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{TLS: true})
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), SSL: true, SSLVerify: true, ServerName: "localhost", TLSConfig: srv.TLSConfig()})
	if d := oneTake(t, c); !d.Allowed || d.State(0).Remaining != 4 {
		t.Fatalf("decision over TLS: %+v", d)
	}
	// Verification on, but the CA unknown: the handshake must fail.
	if c, err := connect(Config{Host: srv.Host(), Port: srv.Port(), SSL: true, SSLVerify: true}); err == nil {
		c.Close()
		t.Fatal("connecting verified a certificate signed by an unknown CA")
	}
	// Verification off (Kong's ssl_verify false): accepted.
	c2 := dial(t, Config{Host: srv.Host(), Port: srv.Port(), SSL: true})
	if d := oneTake(t, c2); !d.Allowed {
		t.Fatal("denied over unverified TLS")
	}
}

func TestACLUser(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Username: "gateway", UserPassword: "s3cret"})
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Username: "gateway", Password: "s3cret"})
	if d := oneTake(t, c); !d.Allowed {
		t.Fatal("denied as ACL user")
	}
	if c, err := connect(Config{Host: srv.Host(), Port: srv.Port(), Username: "gateway", Password: "wrong"}); err == nil {
		c.Close()
		t.Fatal("connecting accepted a wrong password")
	}
}

func TestPasswordAndDatabase(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "pw"})
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Password: "pw", Database: 3})
	oneTake(t, c)
	if n := srv.Do(t, "SELECT", "3"); n != "OK" {
		t.Fatal(n)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ClusterNodes: []Addr{{}}, Database: 1}, "database must be 0 on Redis Cluster"},
		{Config{SentinelMaster: "m"}, "sentinel_nodes must be set"},
		{Config{SentinelMaster: "m", SentinelNodes: []Addr{{}}, SentinelRole: "primary"}, "sentinel_role must be"},
		{Config{Database: -1}, "database must not be negative"},
	} {
		_, err := NewClient(tc.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClient(%+v) = %v, want ErrConfig with %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(nil, Options{}); !errors.Is(err, ErrConfig) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestLeases(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "leases", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	at := ratelimittest.At
	req := func(id string, now time.Duration) ratelimit.Lease {
		t.Helper()
		l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "poll", ID: id, Max: 1, TTL: 30 * time.Second, Now: at(now)})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := req("a", 0); !l.Allowed || !l.Expires.Equal(at(30*time.Second)) {
		t.Fatalf("first lease %+v", l)
	}
	// A holder that never releases keeps the slot until its TTL ...
	if l := req("b", 10*time.Second); l.Allowed || l.RetryAfter != 20*time.Second {
		t.Fatalf("second lease while the first is live: %+v", l)
	}
	// ... and loses it then.
	if l := req("b", 30*time.Second); !l.Allowed || l.Active != 1 {
		t.Fatalf("second lease after the first's TTL: %+v", l)
	}
	for range 2 { // release twice: harmless
		if err := s.Release(ctx, "poll", "b"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx, "poll", "never-held"); err != nil {
		t.Fatal(err)
	}
	if l := req("c", 31*time.Second); !l.Allowed {
		t.Fatalf("lease after release: %+v", l)
	}
}

func TestBadReplies(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "bad", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	now := ratelimittest.At(0)
	win := []ratelimit.Limit{ratelimit.PerMinute(5).Sliding()}
	// A foreign value under the store's key: Redis answers WRONGTYPE, the
	// store says so, naming the command and the key, instead of deciding
	// on garbage.
	key := testWindowKey(s, "k", win[0], now)
	srv.Do(t, "HSET", key, "f", "v")
	_, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: win, Now: now})
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "INCRBY "+key) {
		t.Fatalf("Take over a hash: %v, want ErrBadReply naming WRONGTYPE, INCRBY and the key", err)
	}
	if st := s.Stats(); st.State != StateConnected {
		t.Fatalf("a bad reply switched the store to %s: Redis did answer", st.State)
	}
	// A previous window that does not hold a count: quoted, and the call's
	// own hit taken back.
	prev := testWindowKey(s, "k2", win[0], now.Add(-time.Minute))
	srv.Do(t, "SET", prev, "12 x 3")
	if _, err := s.Take(ctx, ratelimit.Request{Key: "k2", Limits: win, Now: now}); !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), prev) || !strings.Contains(err.Error(), "12 x 3") {
		t.Fatalf("Take over a corrupt count: %v, want ErrBadReply naming the key and quoting the value", err)
	}
	if got := srv.Do(t, "GET", testWindowKey(s, "k2", win[0], now)); got != "0" {
		t.Fatalf("count of the failed call's window %v, want 0 (its hit taken back)", got)
	}

	// Token buckets are decided by take.lua, which reports the same way.
	lim := []ratelimit.Limit{ratelimit.PerMinute(5).TokenBucket(5)}
	srv.Do(t, "HSET", s.counterKey("b", storekit.CounterID(lim[0])), "f", "v")
	_, err = s.Take(ctx, ratelimit.Request{Key: "b", Limits: lim, Now: now})
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "take.lua") {
		t.Fatalf("Take over a hash: %v, want ErrBadReply naming WRONGTYPE and take.lua", err)
	}
	srv.Do(t, "SET", s.counterKey("b2", storekit.CounterID(lim[0])), "12 x 3")
	if _, err := s.Take(ctx, ratelimit.Request{Key: "b2", Limits: lim, Now: now}); !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "12 x 3") {
		t.Fatalf("Take over a corrupt TAT: %v, want ErrBadReply quoting the value", err)
	}
	// A reply of the wrong shape (a script from another version, say).
	orig := takeScript
	takeScript = newScript("short.lua", "return {1, 2, 'x'}")
	_, err = s.Take(ctx, ratelimit.Request{Key: "k3", Limits: lim, Now: ratelimittest.At(0)})
	takeScript = orig
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "want 5") {
		t.Fatalf("Take with a short reply: %v", err)
	}
	takeScript = newScript("strings.lua", "return {1, 2, 'x', 'y', 'z'}")
	_, err = s.Take(ctx, ratelimit.Request{Key: "k3", Limits: lim, Now: ratelimittest.At(0)})
	takeScript = orig
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "value 2") {
		t.Fatalf("Take with a string reply: %v", err)
	}
	srv.Do(t, "SET", s.leaseKey("l"), "x")
	if _, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "l", ID: "a", Max: 1, TTL: time.Second, Now: ratelimittest.At(0)}); !errors.Is(err, ErrBadReply) {
		t.Fatalf("Acquire over a string key: %v, want ErrBadReply", err)
	}
}

func TestInvalidRequests(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "inv", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	// take.lua computes in doubles: a bucket beyond their exact range is
	// refused. Windows are counted by INCRBY and decided in Go, exactly
	// at any size.
	huge := ratelimit.Limit{Count: 1 << 40, Window: 100 * 365 * 24 * time.Hour}
	if _, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{huge.TokenBucket(2 << 40)}, Now: ratelimittest.At(0)}); !errors.Is(err, ratelimit.ErrInvalidLimit) || !strings.Contains(err.Error(), "2^52") {
		t.Fatalf("bucket beyond exact range: %v", err)
	}
	if d, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{huge.Fixed()}, Now: ratelimittest.At(0)}); err != nil || !d.Allowed {
		t.Fatalf("huge fixed window: allowed=%v err=%v", d.Allowed, err)
	}
	if _, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(1)}, Cost: -1}); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Fatalf("negative cost: %v", err)
	}
	s.Close()
	if _, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(1)}}); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
}

func TestKeysDoNotCollide(t *testing.T) {
	seen := map[string][2]string{}
	for _, k := range [][2]string{{"a:b", "c"}, {"a", "b:c"}, {"}", ""}, {"", "}"}, {"1:x", ""}, {"", "1:x"}} {
		st := &Store{tag: "p:{" + strconv.Itoa(len(k[0])) + ":" + k[0]}
		got := st.counterKey(k[1], 120)
		if prev, ok := seen[got]; ok && prev != k {
			t.Fatalf("%q and %q share key %q", prev, k, got)
		}
		seen[got] = k
	}
	a := (&Store{tag: "p:{1:a"}).counterKey("b", 1)
	b := (&Store{tag: "p:{2:ab"}).counterKey("", 1)
	if a == b {
		t.Fatalf("namespace/key boundary collides: %q", a)
	}
}

func FuzzCounterKey(f *testing.F) {
	f.Add("ns", "a:b", "ns:a", "b")
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		if ns1 == ns2 && k1 == k2 {
			return
		}
		s1 := &Store{tag: "sluice:{" + strconv.Itoa(len(ns1)) + ":" + ns1}
		s2 := &Store{tag: "sluice:{" + strconv.Itoa(len(ns2)) + ":" + ns2}
		if s1.counterKey(k1, 7) == s2.counterKey(k2, 7) {
			t.Fatalf("(%q,%q) and (%q,%q) collide", ns1, k1, ns2, k2)
		}
	})
}

func TestSweeperUnderSynctest(t *testing.T) {
	_, c := standalone(t)
	synctest.Test(t, func(t *testing.T) {
		s, err := New(c, Options{SyncRate: LocalOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Take(context.Background(), ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerSecond(1)}}); err != nil {
			t.Fatal(err)
		}
		if n := s.Stats().Keys; n != 1 {
			t.Fatalf("%d keys", n)
		}
		time.Sleep(sweepInterval + time.Millisecond)
		synctest.Wait()
		if n := s.Stats().Keys; n != 0 {
			t.Fatalf("%d keys left after the sweep", n)
		}
	})
}

func TestManyLimitsInOneRequest(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "many", CallerClock: true, ManualSync: true})
	ls := make([]ratelimit.Limit, 1500) // more keys than one MGET takes
	for i := range ls {
		ls[i] = ratelimit.Every(2, time.Duration(i+1)*time.Second).Fixed()
	}
	r := ratelimit.Request{Key: "k", Limits: ls, Now: ratelimittest.At(0)}
	for i := range 3 {
		d := take(t, s, r)
		if d.Len() != len(ls) || d.Allowed != (i < 2) {
			t.Fatalf("call %d: allowed %v with %d states", i, d.Allowed, d.Len())
		}
	}
}
