package memorystore

import (
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// nextLen returns the number of counters holding units reserved in their
// next window.
func (s *Store) nextLen() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.next)
		sh.mu.Unlock()
	}
	return n
}

// Units reserved in a counter's next window are kept beside its slot until
// that window begins, then counted in it; a dropped counter takes them
// along.
func TestReservedNextWindowKeptApart(t *testing.T) {
	s := New(Options{SweepInterval: -1})
	defer s.Close()
	limits := []ratelimit.Limit{ratelimit.PerMinute(1).Fixed()}
	r := ratelimit.Request{Key: "k", Limits: limits, Now: ratelimittest.At(0)}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	b, err := s.Reserve(ctx, r, ratelimit.InfDuration)
	if err != nil || !b.OK || !b.At.Equal(ratelimittest.At(time.Minute)) {
		t.Fatalf("Reserve = %+v, %v; want OK at t0+1m", b, err)
	}
	if n := s.nextLen(); n != 1 {
		t.Fatalf("%d counters hold reserved units, want 1", n)
	}
	s.sweep(ratelimittest.At(2 * time.Minute).UnixNano()) // still alive: the reservation counts until 3m
	r.Now = ratelimittest.At(time.Minute)
	if d, err := s.Take(ctx, r); err != nil || d.Allowed {
		t.Fatalf("Take in the reserved window = %v, %v; want denied", d.Allowed, err)
	}
	if n := s.nextLen(); n != 0 {
		t.Errorf("%d counters hold reserved units after their window began, want 0", n)
	}

	r.Key, r.Now = "other", ratelimittest.At(0)
	for range 2 {
		if _, err := s.Reserve(ctx, r, ratelimit.InfDuration); err != nil {
			t.Fatal(err)
		}
	}
	s.sweep(ratelimittest.At(3 * time.Minute).UnixNano())
	if n, l := s.nextLen(), s.Len(); n != 0 || l != 0 {
		t.Errorf("after the sweep: %d reserved, %d entries; want none", n, l)
	}
}
