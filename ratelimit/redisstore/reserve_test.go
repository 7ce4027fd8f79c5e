package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// A reservation one node makes is counted in Redis, in the window it is
// for: another node sees it, a cancel by another node gives it back, and
// a Take in that window sees the reservation made again.
func TestReserveSharedBetweenNodes(t *testing.T) {
	_, c := standalone(t)
	a := newStore(t, c, Options{Namespace: "reserve", CallerClock: true, ManualSync: true})
	b := newStore(t, c, Options{Namespace: "reserve", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1).Fixed()}, Now: ratelimittest.At(0)}
	take(t, a, r)
	bk, err := a.Reserve(ctx, r, ratelimit.InfDuration)
	if err != nil || !bk.OK || !bk.At.Equal(ratelimittest.At(time.Minute)) {
		t.Fatalf("Reserve = %+v, %v; want OK at t0+1m", bk, err)
	}
	if other, err := b.Reserve(ctx, r, ratelimit.InfDuration); err != nil || other.OK {
		t.Fatalf("a second node's Reserve = %+v, %v; want not OK: the next window is taken", other, err)
	}
	cancel := r
	cancel.Now = ratelimittest.At(30 * time.Second)
	if err := b.Unreserve(ctx, cancel, bk); err != nil {
		t.Fatal(err)
	}
	again, err := b.Reserve(ctx, cancel, ratelimit.InfDuration)
	if err != nil || !again.OK || !again.At.Equal(ratelimittest.At(time.Minute)) {
		t.Fatalf("Reserve after the cancel = %+v, %v; want the unit back, OK at t0+1m", again, err)
	}
	next := r
	next.Now = ratelimittest.At(time.Minute)
	if d := take(t, a, next); d.Allowed {
		t.Fatal("a node was allowed the unit another node reserved")
	}
}

// On Redis' clock the delay is Redis' own, carried to the caller's clock.
func TestReserveOnRedisClock(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "reserve-clock"})
	ctx := context.Background()
	limits := []ratelimit.Limit{ratelimit.PerHour(1).TokenBucket(0)}
	now := time.Now()
	first, err := s.Reserve(ctx, ratelimit.Request{Key: "k", Limits: limits, Now: now}, ratelimit.InfDuration)
	if err != nil || !first.OK || !first.At.Equal(now) {
		t.Fatalf("first Reserve = %+v, %v; want OK at once", first, err)
	}
	second, err := s.Reserve(ctx, ratelimit.Request{Key: "k", Limits: limits, Now: now}, ratelimit.InfDuration)
	if d := second.At.Sub(now); err != nil || !second.OK || d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("second Reserve = %+v, %v (delay %s); want OK about an hour on", second, err, d)
	}
	if err := s.Unreserve(ctx, ratelimit.Request{Key: "k", Limits: limits, Now: now}, second); err != nil {
		t.Fatal(err)
	}
	third, err := s.Reserve(ctx, ratelimit.Request{Key: "k", Limits: limits, Now: now}, time.Minute)
	if err != nil || third.OK {
		t.Fatalf("Reserve bounded by a minute = %+v, %v; want not OK", third, err)
	}
	if d := third.At.Sub(now); d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("a not-OK reservation says to try again in %s, want about an hour: the cancel gave nothing back", d)
	}
}

// The periodic and Kong-layout modes cannot reserve, and say so; a
// Limiter over them waits by polling.
func TestReserveUnsupportedModes(t *testing.T) {
	_, c := standalone(t)
	ctx := context.Background()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1)}, Now: ratelimittest.At(0)}
	for _, o := range []Options{{SyncRate: time.Second}, {KongLayout: true}} {
		o.Namespace, o.CallerClock, o.ManualSync = "reserve-modes", true, true
		s := newStore(t, c, o)
		if _, err := s.Reserve(ctx, r, ratelimit.InfDuration); !errors.Is(err, ratelimit.ErrReserveUnsupported) {
			t.Errorf("Reserve with %+v = %v, want ErrReserveUnsupported", o, err)
		}
		l, err := ratelimit.NewLimiter(s, ratelimit.LimiterOptions{}, ratelimit.PerMinute(5))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Wait(ctx, "w"); err != nil {
			t.Errorf("Wait with %+v = %v", o, err)
		}
	}
}

// With Redis refused, a reservation is decided on local counters, as Take
// is, and Strict makes it an error.
func TestReserveWhileRedisRefused(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Stop()
	c, err := NewClient(Config{Host: srv.Host(), Port: srv.Port()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1).Fixed()}, Now: ratelimittest.At(0)}
	s := newStore(t, c, Options{Namespace: "reserve-down", CallerClock: true, ManualSync: true})
	for i, want := range []time.Duration{0, time.Minute} {
		b, err := s.Reserve(ctx, r, ratelimit.InfDuration)
		if err != nil || !b.OK || !b.At.Equal(ratelimittest.At(want)) {
			t.Fatalf("local reservation %d = %+v, %v; want OK at t0+%s", i, b, err, want)
		}
	}
	if st := s.Stats(); st.LocalDecisions != 2 {
		t.Errorf("%d local decisions, want 2", st.LocalDecisions)
	}
	strict := newStore(t, c, Options{Namespace: "reserve-down", CallerClock: true, ManualSync: true, Strict: true})
	if _, err := strict.Reserve(ctx, r, ratelimit.InfDuration); !errors.Is(err, ErrUnavailable) {
		t.Errorf("strict Reserve with redis refused = %v, want ErrUnavailable", err)
	}
}

// A key holding something else than a count fails the reservation with
// ErrBadReply, and nothing is written.
func TestReserveForeignValue(t *testing.T) {
	srv, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "reserve-foreign", CallerClock: true, ManualSync: true})
	ctx := context.Background()
	l := ratelimit.PerMinute(1).Fixed()
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{l}, Now: ratelimittest.At(0)}
	take(t, s, r)
	next := testWindowKey(s, "k", l, ratelimittest.At(time.Minute))
	srv.Do(t, "RPUSH", next, "x")
	if _, err := s.Reserve(ctx, r, ratelimit.InfDuration); !errors.Is(err, ErrBadReply) {
		t.Fatalf("Reserve over a list = %v, want ErrBadReply", err)
	}
	if got := srv.Do(t, "TYPE", next); got != "list" {
		t.Errorf("TYPE %s = %v after the failed reservation, want list", next, got)
	}
}
