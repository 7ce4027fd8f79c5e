package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// A store built while Redis refuses connections decides with local
// counters from its first call, and in Redis once it answers: the first
// call after the cool-down connects.
func TestBuiltWhileRedisRefused(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Stop()
	c, err := NewClient(Config{Host: srv.Host(), Port: srv.Port()})
	if err != nil {
		t.Fatalf("NewClient with redis down: %v", err)
	}
	t.Cleanup(c.Close)
	var tr transitions
	s := newStore(t, c, Options{Namespace: "lazy", CallerClock: true, ManualSync: true, OnStateChange: tr.record})
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}, Now: ratelimittest.At(0)}
	if d := take(t, s, r); !d.Allowed || d.State(0).Remaining != 9 {
		t.Fatalf("first call with redis refused: %+v", d)
	}
	if st := s.Stats(); st.State != StateFallback || st.LocalDecisions != 1 {
		t.Fatalf("after the first call: %+v, want fallback and one local decision", st)
	}

	srv.Restart(t)
	r.Now = ratelimittest.At(time.Second) // the cool-down has passed
	if d := take(t, s, r); !d.Allowed || d.State(0).Remaining != 9 {
		t.Fatalf("first call once redis answers: %+v, want Redis' fresh count", d)
	}
	if st := s.Stats(); st.State != StateConnected || st.LocalDecisions != 1 {
		t.Fatalf("once redis answers: %+v, want connected and no further local decision", st)
	}
	if n, _ := srv.Do(t, "DBSIZE").(int64); n == 0 {
		t.Fatal("redis holds no key after a decision in redis")
	}
	if got, want := tr.String(), "connected>fallback fallback>probing probing>connected"; got != want {
		t.Fatalf("state changes %q, want %q", got, want)
	}
}

// silentListener accepts connections and never answers, as a Redis that
// hangs (or a firewall that accepts) does. It returns its address.
func silentListener(t *testing.T) Addr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	a := ln.Addr().(*net.TCPAddr)
	return Addr{Host: a.IP.String(), Port: a.Port}
}

// returnsWithin runs f and fails the test when it has not returned within
// limit: a bound far above what f should take, so a loaded machine does
// not fail it, far below the connect timeout it must not wait for.
func returnsWithin(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s", what, limit)
	}
}

// A Redis that accepts and never answers: the first call waits for the
// connection no longer than its call deadline (Options.Timeout), not the
// connect timeout (an hour here), and decides locally; Close ends the
// connection attempt at once.
func TestFirstCallBoundedByCallDeadline(t *testing.T) {
	a := silentListener(t)
	c, err := NewClient(Config{Host: a.Host, Port: a.Port, ConnectTimeout: time.Hour, SendTimeout: time.Hour, ReadTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(c, Options{Namespace: "silent", CallerClock: true, ManualSync: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}, Now: ratelimittest.At(0)}
	var d ratelimit.Decision
	returnsWithin(t, 20*time.Second, "the first Take", func() { d = take(t, s, r) })
	if !d.Allowed || s.Stats().LocalDecisions != 1 || s.Stats().State != StateFallback {
		t.Fatalf("first call: %+v, stats %+v; want a local decision and fallback", d, s.Stats())
	}
	// Strict callers get the unavailability, wrapped, within the deadline too.
	strict, err := New(c, Options{Namespace: "silent-strict", CallerClock: true, ManualSync: true, Timeout: 50 * time.Millisecond, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, 20*time.Second, "a strict Take", func() {
		if _, err := strict.Take(context.Background(), r); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("strict Take = %v, want ErrUnavailable after the call deadline", err)
		}
	})
	returnsWithin(t, 20*time.Second, "Close", func() {
		s.Close()
		strict.Close()
		c.Close()
	})
}

// Open's store owns its client: Close closes it, and its connections.
func TestOpenClosesItsClient(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	s, err := Open(Config{Host: srv.Host(), Port: srv.Port()}, Options{Namespace: "owned", CallerClock: true, ManualSync: true, Timeout: 10 * time.Second, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	take(t, s, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}, Now: ratelimittest.At(0)})
	clients := func() int {
		list, _ := srv.Do(t, "CLIENT", "LIST").(string)
		return strings.Count(list, "resp=3") // the client's; the test's own speaks RESP2
	}
	if n := clients(); n == 0 {
		t.Fatal("no connection of the client while the store is open")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Ping(context.Background()); !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Ping after Close = %v, want ErrClosed", err)
	}
	// The server notices the closed sockets a moment later.
	for deadline := time.Now().Add(10 * time.Second); clients() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of the client left after Close", clients())
		}
		<-time.After(10 * time.Millisecond) // poll interval, bounded by the deadline
	}

	if _, err := Open(Config{Database: -1}, Options{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Open with a bad config = %v, want ErrConfig", err)
	}
}

// With cloud authentication, a refused token names the setting in use,
// config.redis.cloud_authentication, not the password.
func TestCloudAuthFaultNamesTheSetting(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Do(t, "ACL", "SETUSER", "alice", "on", ">not-the-token", "~*", "&*", "+@all")
	clock := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	c, err := NewClient(Config{Host: srv.Host(), Port: srv.Port(), Username: "alice", CloudAuth: awsTestAuth(clock)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := Classify(c.Ping(ctx))
	if f == nil || f.Reason != "wrongpass" || f.Setting != "cloud_authentication" || !strings.Contains(f.Error(), "check cloud_authentication") {
		t.Fatalf("Ping with a refused token: %+v, want wrongpass naming cloud_authentication", f)
	}

	var logs bytes.Buffer
	s := newStore(t, c, Options{Namespace: "cloud", CallerClock: true, ManualSync: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	take(t, s, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}, Now: ratelimittest.At(0)})
	if !strings.Contains(logs.String(), "setting=config.redis.cloud_authentication") || strings.Contains(logs.String(), "config.redis.password") {
		t.Fatalf("log does not name config.redis.cloud_authentication:\n%s", logs.String())
	}
}
