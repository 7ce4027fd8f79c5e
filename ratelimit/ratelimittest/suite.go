package ratelimittest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Factory returns a fresh, empty store for one subtest; the suite closes it.
type Factory func(t *testing.T) ratelimit.Store

// Run holds the store made by f to every timeline of the suite, one subtest
// per timeline, each on a fresh store. A store that is also a
// ratelimit.LeaseStore is held to the lease timelines too; for any other
// they are skipped; a ratelimit.Reserver to the reservation timelines
// (PlayReserve). Every store is held to the allow-only path
// (PlayAllowOnly) and to Request.Peek (PlayPeek); an
// Inspector or LeaseInspector to RunInspect. Run ends with a Hammer run
// with default options.
func Run(t *testing.T, f Factory) {
	for _, tl := range Timelines() {
		t.Run(tl.Name, func(t *testing.T) { Play(t, open(t, f), tl) })
	}
	for _, tl := range Timelines() {
		t.Run("AllowOnly/"+tl.Name, func(t *testing.T) { PlayAllowOnly(t, open(t, f), open(t, f), tl) })
	}
	for _, tl := range Timelines() {
		t.Run("Peek/"+tl.Name, func(t *testing.T) { PlayPeek(t, open(t, f), tl) })
	}
	runReserve(t, f)
	RunInspect(t, f)
	for _, tl := range LeaseTimelines() {
		t.Run(tl.Name, func(t *testing.T) { PlayLeases(t, openLeases(t, f), tl) })
	}
	t.Run("Invalid/Requests", func(t *testing.T) { testInvalidRequests(t, open(t, f)) })
	t.Run("Invalid/Leases", func(t *testing.T) { testInvalidLeases(t, openLeases(t, f)) })
	t.Run("Keys/Independent", func(t *testing.T) { testKeysIndependent(t, open(t, f)) })
	t.Run("Leases/IndependentOfCounters", func(t *testing.T) {
		s := openLeases(t, f)
		testLeasesIndependentOfCounters(t, s.(ratelimit.Store), s)
	})
	t.Run("Hammer", func(t *testing.T) { Hammer(t, open(t, f), HammerOptions{}) })
}

// RunLimiter holds the store made by f to every timeline of the suite
// played through a ratelimit.Limiter (PlayLimiter), one subtest per
// timeline, each on a fresh store. PlayLimiter moves a testing/synctest
// bubble's clock, so the store must decide on its caller's goroutine, as
// an in-process store does; a store that hands calls to goroutines of its
// own (Redis batching) cannot run it.
func RunLimiter(t *testing.T, f Factory) {
	for _, tl := range Timelines() {
		t.Run("Limiter/"+tl.Name, func(t *testing.T) { PlayLimiter(t, open(t, f), tl) })
	}
}

// openLeases opens a store and skips t when it keeps no leases.
func openLeases(t *testing.T, f Factory) ratelimit.LeaseStore {
	t.Helper()
	ls, ok := open(t, f).(ratelimit.LeaseStore)
	if !ok {
		t.Skip("the store is not a ratelimit.LeaseStore")
	}
	return ls
}

func open(t *testing.T, f Factory) ratelimit.Store {
	t.Helper()
	s := f(t)
	if s == nil {
		t.Fatal("factory returned a nil store")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

const (
	ms     = time.Millisecond
	sec    = time.Second
	minute = time.Minute
)

// Timelines returns the suite's Take timelines. Each starts on an empty
// store.
func Timelines() []Timeline {
	fixed2 := []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}
	sliding2 := []ratelimit.Limit{ratelimit.PerMinute(2)}
	bucket := []ratelimit.Limit{ratelimit.PerSecond(10).TokenBucket(5)}
	six := func(last Step) []Step { // Kong's example: six hits at t=90 s, then one more
		var st []Step
		for i := range 6 {
			st = append(st, Step{At: 90 * sec, Allowed: true, Remaining: []int64{int64(9 - i)}})
		}
		return append(st, last)
	}
	return []Timeline{
		{
			// Requests 1..Count pass in a window, Count+1 is denied until the
			// window's last nanosecond; the next window starts from zero.
			Name: "Fixed/WindowEdges", Limits: fixed2,
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{1}, Reset: []time.Duration{minute}},
				{At: minute - 1, Allowed: true, Remaining: []int64{0}, Reset: []time.Duration{1}},
				{At: minute - 1, Allowed: false, RetryAfter: 1, Remaining: []int64{0}},
				{At: minute, Allowed: true, Remaining: []int64{1}, Reset: []time.Duration{minute}},
				{At: minute, Allowed: true, Remaining: []int64{0}},
				{At: minute, Allowed: false, RetryAfter: minute},
				{At: 2*minute - ms, Allowed: false, RetryAfter: ms},
				{At: 2 * minute, Allowed: true, Remaining: []int64{1}},
			},
		},
		{
			// A day window is aligned to UTC midnight.
			Name: "Fixed/DayWindow", Limits: []ratelimit.Limit{ratelimit.PerDay(1).Fixed()},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{0}, Reset: []time.Duration{24 * time.Hour}},
				{At: 24*time.Hour - 1, Allowed: false, RetryAfter: 1},
				{At: 24 * time.Hour, Allowed: true},
			},
		},
		{
			// The previous window weighs on the current one: a client that
			// used the whole limit at the end of one window cannot use it
			// again at the start of the next.
			Name: "Sliding/WindowEdges", Limits: sliding2,
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{1}, Reset: []time.Duration{minute}},
				{At: minute - 1, Allowed: true, Remaining: []int64{0}},
				// rate 2 would be 3; at 90 s the previous 2 weigh 1.
				{At: minute - 1, Allowed: false, RetryAfter: 30*sec + 1, Remaining: []int64{0}},
				{At: minute, Allowed: false, RetryAfter: 30 * sec, Remaining: []int64{0}},
				{At: minute + 30*sec - ms, Allowed: false, RetryAfter: ms},
				{At: minute + 30*sec, Allowed: true, Remaining: []int64{0}},
				// The window of 1..2 minute held one hit: at 2 minute it weighs 1.
				{At: 2 * minute, Allowed: true, Remaining: []int64{0}},
				{At: 2 * minute, Allowed: false},
			},
		},
		{
			// Kong's worked example: limit 10/60 s, six hits at t=90 s, one at t=150 s:
			// rate = 1 + 6 × 30/60 = 4, remaining 6.
			Name: "Sliding/KongExampleAt150s", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)},
			Steps: six(Step{At: 150 * sec, Allowed: true, Remaining: []int64{6}}),
		},
		{
			// The same at t=130 s: rate = 1 + 6 × 50/60 = 6, remaining 4.
			Name: "Sliding/KongExampleAt130s", Limits: []ratelimit.Limit{ratelimit.PerMinute(10)},
			Steps: six(Step{At: 130 * sec, Allowed: true, Remaining: []int64{4}}),
		},
		{
			// The library docs' example: 30 s into the window, current 10,
			// previous 40, rate 30.
			Name: "Sliding/KongLibraryExample", Limits: []ratelimit.Limit{ratelimit.PerMinute(100)},
			Steps: []Step{
				{At: 30 * sec, Cost: 40, Allowed: true, Remaining: []int64{60}},
				{At: 90 * sec, Cost: 9, Allowed: true, Remaining: []int64{71}},
				{At: 90 * sec, Allowed: true, Remaining: []int64{70}},
			},
		},
		{
			// Fractional weights are compared exactly: 3 previous hits at
			// 20 s into the window weigh exactly 2, one millisecond earlier
			// a hair more.
			Name: "Sliding/ExactFraction", Limits: []ratelimit.Limit{ratelimit.PerMinute(3)},
			Steps: []Step{
				{At: 0, Cost: 3, Allowed: true, Remaining: []int64{0}},
				{At: minute + 20*sec - ms, Allowed: false, RetryAfter: ms},
				{At: minute + 20*sec, Allowed: true, Remaining: []int64{0}},
			},
		},
		{
			// Without Penalty, denied calls are not counted: half a window
			// later the previous window's 2 hits weigh 1.
			Name: "Sliding/AllOrNothing", Limits: sliding2,
			Steps: []Step{
				{At: 0, Allowed: true},
				{At: 0, Allowed: true},
				{At: sec, Allowed: false, RetryAfter: 89 * sec},
				{At: sec, Allowed: false, RetryAfter: 89 * sec},
				{At: 90 * sec, Allowed: true, Remaining: []int64{0}},
			},
		},
		{
			// With Penalty, denied calls stay counted (Kong's default): the
			// previous window holds 4 and the client stays blocked.
			Name: "Sliding/Penalty", Limits: sliding2, Penalty: true,
			Steps: []Step{
				{At: 0, Allowed: true},
				{At: 0, Allowed: true},
				{At: sec, Allowed: false},
				{At: sec, Allowed: false},
				// rate 4 × 1/2 + 1 = 3 > 2; the denied call is counted too, so
				// the next window's previous count is 1.
				{At: 90 * sec, Allowed: false, RetryAfter: 30 * sec},
				{At: 2 * minute, Allowed: true, Remaining: []int64{0}},
			},
		},
		{
			// GCRA: 10 per second, at most 5 at once.
			Name: "TokenBucket/BurstAndRefill", Limits: bucket,
			Steps: []Step{
				{At: 0, Cost: 5, Allowed: true, Remaining: []int64{0}, Reset: []time.Duration{500 * ms}},
				{At: 0, Allowed: false, RetryAfter: 100 * ms, Remaining: []int64{0}},
				{At: 99 * ms, Allowed: false, RetryAfter: ms},
				{At: 100 * ms, Allowed: true, Remaining: []int64{0}},
				{At: 600 * ms, Allowed: true, Remaining: []int64{4}, Reset: []time.Duration{100 * ms}},
				{At: 600 * ms, Cost: 4, Allowed: true, Remaining: []int64{0}},
				{At: 1600 * ms, Cost: 5, Allowed: true, Remaining: []int64{0}},
				{At: 1600 * ms, Cost: 6, Allowed: false, RetryAfter: ratelimit.InfDuration},
				// A long idle period fills the bucket to Burst, not beyond.
				{At: time.Hour, Allowed: true, Remaining: []int64{4}},
			},
		},
		{
			// Burst zero means Count, and a full bucket admits exactly Burst
			// calls at once even when Window/Count is not a whole number of
			// microseconds: the refill interval is rounded up, never the
			// depth down.
			Name: "TokenBucket/BurstDefaultsToCount", Limits: []ratelimit.Limit{ratelimit.PerSecond(3).TokenBucket(0)},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{2}},
				{At: 0, Allowed: true, Remaining: []int64{1}},
				{At: 0, Allowed: true, Remaining: []int64{0}},
				// T = 333334 µs; the bucket math works in whole microseconds.
				{At: 0, Allowed: false, RetryAfter: 333334 * time.Microsecond},
				{At: 333333 * time.Microsecond, Allowed: false, RetryAfter: time.Microsecond},
				{At: 333334 * time.Microsecond, Allowed: true, Remaining: []int64{0}},
				{At: 333334 * time.Microsecond, Allowed: false},
			},
		},
		{
			// A bucket is never charged for a denied call, Penalty or not.
			Name: "TokenBucket/NoPenalty", Limits: bucket, Penalty: true,
			Steps: []Step{
				{At: 0, Cost: 5, Allowed: true},
				{At: 0, Allowed: false},
				{At: 50 * ms, Allowed: false},
				{At: 100 * ms, Allowed: true},
			},
		},
		{
			Name: "Cost/Units", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).Fixed()},
			Steps: []Step{
				{At: 0, Cost: 0, Allowed: true, Remaining: []int64{2}}, // zero means 1
				{At: 0, Cost: 2, Allowed: true, Remaining: []int64{0}},
				{At: minute, Cost: 2, Allowed: true, Remaining: []int64{1}},
				{At: minute, Cost: 2, Allowed: false, RetryAfter: minute},
				{At: minute, Cost: 1, Allowed: true, Remaining: []int64{0}},
				{At: 2 * minute, Cost: 3, Allowed: true, Remaining: []int64{0}},
			},
		},
		{
			// A cost above the limit can never pass: RetryAfter is
			// InfDuration, and without Penalty nothing is counted.
			Name: "Cost/AboveCapacity", Limits: []ratelimit.Limit{ratelimit.PerMinute(3)},
			Steps: []Step{
				{At: 0, Cost: 4, Allowed: false, RetryAfter: ratelimit.InfDuration},
				{At: 0, Cost: 3, Allowed: true, Remaining: []int64{0}},
			},
		},
		{
			// With Penalty the impossible call is counted like any denied
			// call.
			Name: "Cost/AboveCapacityPenalty", Limits: []ratelimit.Limit{ratelimit.PerMinute(3).Fixed()}, Penalty: true,
			Steps: []Step{
				{At: 0, Cost: 4, Allowed: false, RetryAfter: ratelimit.InfDuration},
				{At: 0, Allowed: false, RetryAfter: minute},
				{At: minute, Allowed: true, Remaining: []int64{2}},
			},
		},
		{
			// A huge cost (2^40, still exact in a Lua double) is denied and,
			// with Penalty, blocks the rest of the window: it must never wrap
			// a counter around.
			Name: "Cost/Huge", Limits: []ratelimit.Limit{ratelimit.PerSecond(5).Fixed(), ratelimit.PerMinute(100)}, Penalty: true,
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{4, 99}},
				{At: 0, Cost: 1 << 40, Allowed: false, RetryAfter: ratelimit.InfDuration},
				{At: 500 * ms, Allowed: false, Denied: 0, RetryAfter: 500 * ms},
				{At: sec, Allowed: true, Remaining: []int64{4, 98}},
			},
		},
		{
			// Several limits are decided together: when one denies, none is
			// consumed. The third call at 1 s is denied by the minute limit
			// again, not by the second limit, because the denied second call
			// left no trace in it.
			Name:   "Limits/AllOrNothing",
			Limits: []ratelimit.Limit{ratelimit.PerSecond(2).Fixed(), ratelimit.PerMinute(3).Fixed()},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{1, 2}},
				{At: 0, Allowed: true, Remaining: []int64{0, 1}},
				// Later limits are only read once one has denied.
				{At: 0, Allowed: false, Denied: 0, RetryAfter: sec, Remaining: []int64{0, 1}},
				{At: sec, Allowed: true, Remaining: []int64{1, 0}},
				{At: sec, Allowed: false, Denied: 1, Remaining: []int64{0, 0}},
				{At: sec, Allowed: false, Denied: 1, RetryAfter: 59 * sec, Remaining: []int64{0, 0}},
				{At: minute, Allowed: true, Remaining: []int64{1, 2}},
			},
		},
		{
			// With Penalty the limits up to the denying one keep the cost;
			// those after it are not charged.
			Name: "Limits/Penalty", Penalty: true,
			Limits: []ratelimit.Limit{ratelimit.PerSecond(2).Fixed(), ratelimit.PerMinute(3).Fixed()},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{1, 2}},
				{At: 0, Allowed: true, Remaining: []int64{0, 1}},
				{At: 0, Allowed: false, Denied: 0, Remaining: []int64{0, 1}},
				{At: sec, Allowed: true, Remaining: []int64{1, 0}},
				{At: sec, Allowed: false, Denied: 1, Remaining: []int64{0, 0}},
				// The second-limit counted the call before: now the first denies.
				{At: sec, Allowed: false, Denied: 0, Remaining: []int64{0, 0}},
				{At: minute, Allowed: true, Remaining: []int64{1, 2}},
			},
		},
		{
			// A window limit before a token bucket: the bucket denies, and
			// only Penalty keeps the window's count.
			Name:   "Limits/WindowThenBucket",
			Limits: []ratelimit.Limit{ratelimit.PerMinute(5).Fixed(), ratelimit.PerSecond(1).TokenBucket(1)},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{4, 0}},
				{At: 0, Allowed: false, Denied: 1, RetryAfter: sec, Remaining: []int64{3, 0}},
				{At: sec, Allowed: true, Remaining: []int64{3, 0}},
			},
		},
		{
			Name: "Limits/WindowThenBucketPenalty", Penalty: true,
			Limits: []ratelimit.Limit{ratelimit.PerMinute(5).Fixed(), ratelimit.PerSecond(1).TokenBucket(1)},
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: []int64{4, 0}},
				{At: 0, Allowed: false, Denied: 1, RetryAfter: sec, Remaining: []int64{3, 0}},
				{At: sec, Allowed: true, Remaining: []int64{2, 0}},
			},
		},
		{
			// Limits are values passed per call: a new configuration is
			// checked against the counts of the old one. Fixed and sliding
			// limits of one window share a counter; a bucket has its own.
			Name: "Limits/NewConfigurationKeepsCounters", Limits: []ratelimit.Limit{ratelimit.PerMinute(5).Fixed()},
			Steps: []Step{
				{At: 0, Cost: 3, Allowed: true, Remaining: []int64{2}},
				{At: sec, Limits: []ratelimit.Limit{ratelimit.PerMinute(4).Fixed()}, Allowed: true, Remaining: []int64{0}},
				{At: 2 * sec, Limits: []ratelimit.Limit{ratelimit.PerMinute(4)}, Allowed: false},
				{At: 2 * sec, Limits: []ratelimit.Limit{ratelimit.PerMinute(5)}, Allowed: true, Remaining: []int64{0}},
				{At: 3 * sec, Limits: []ratelimit.Limit{ratelimit.PerMinute(4).TokenBucket(0)}, Allowed: true, Remaining: []int64{3}},
			},
		},
	}
}

// LeaseTimelines returns the suite's lease timelines. Each starts on an
// empty store.
func LeaseTimelines() []LeaseTimeline {
	return []LeaseTimeline{
		{
			Name: "Leases/MaxRenewRelease", Max: 2, TTL: 10 * sec,
			Steps: []LeaseStep{
				{At: 0, ID: "a", Allowed: true, Active: 1},
				{At: 0, ID: "b", Allowed: true, Active: 2},
				// A slot frees up when the first lease lapses, at 10 s.
				{At: sec, ID: "c", Allowed: false, Active: 2, RetryAfter: 9 * sec},
				// Renewing keeps one slot and moves a's expiry to 12 s.
				{At: 2 * sec, ID: "a", Allowed: true, Active: 2},
				{At: 3 * sec, ID: "c", Allowed: false, Active: 2, RetryAfter: 7 * sec},
				{ID: "b", Release: true},
				{ID: "b", Release: true},               // idempotent
				{ID: "never", Release: true},           // unknown id
				{Key: "other", ID: "a", Release: true}, // unknown key
				{At: 4 * sec, ID: "c", Allowed: true, Active: 2},
				// a lives until 12 s exclusive, c until 14 s.
				{At: 12*sec - ms, ID: "d", Allowed: false, Active: 2, RetryAfter: ms},
				{At: 12 * sec, ID: "d", Allowed: true, Active: 2},
				// A released lease is gone: acquiring it again takes a slot.
				{ID: "c", Release: true},
				{At: 12 * sec, ID: "c", Allowed: true, Active: 2},
			},
		},
		{
			// Without a release, every lease lapses TTL after its last
			// renewal and frees its slot.
			Name: "Leases/TTLExpiry", Max: 1, TTL: 5 * sec,
			Steps: []LeaseStep{
				{At: 0, ID: "crashed", Allowed: true, Active: 1},
				{At: 5*sec - ms, ID: "next", Allowed: false, Active: 1, RetryAfter: ms},
				{At: 5 * sec, ID: "next", Allowed: true, Active: 1},
				// Renewing a lapsed lease is a new acquisition.
				{At: 5 * sec, ID: "crashed", Allowed: false, Active: 1, RetryAfter: 5 * sec},
				{At: 20 * sec, ID: "crashed", Allowed: true, Active: 1},
			},
		},
		{
			Name: "Leases/KeysIndependent", Max: 1, TTL: minute,
			Steps: []LeaseStep{
				{At: 0, Key: "k1", ID: "a", Allowed: true, Active: 1},
				{At: 0, Key: "k2", ID: "a", Allowed: true, Active: 1},
				{At: 0, Key: "k1", ID: "b", Allowed: false, Active: 1},
				{Key: "k2", ID: "a", Release: true},
				{At: 0, Key: "k1", ID: "b", Allowed: false, Active: 1},
				{At: 0, Key: "k2", ID: "b", Allowed: true, Active: 1},
			},
		},
	}
}

// testInvalidRequests: a request that can never be decided is an error
// wrapping ErrInvalidLimit, and it counts nothing.
func testInvalidRequests(t *testing.T, s ratelimit.Store) {
	ctx := context.Background()
	good := ratelimit.PerMinute(1).Fixed()
	cases := []struct {
		name string
		r    ratelimit.Request
	}{
		{"no limits", ratelimit.Request{}},
		{"zero count", ratelimit.Request{Limits: []ratelimit.Limit{{Count: 0, Window: minute}}}},
		{"negative count", ratelimit.Request{Limits: []ratelimit.Limit{{Count: -1, Window: minute}}}},
		{"zero window", ratelimit.Request{Limits: []ratelimit.Limit{{Count: 1}}}},
		{"negative window", ratelimit.Request{Limits: []ratelimit.Limit{{Count: 1, Window: -minute}}}},
		{"sub-millisecond window", ratelimit.Request{Limits: []ratelimit.Limit{{Count: 1, Window: 1500 * time.Microsecond}}}},
		{"negative burst", ratelimit.Request{Limits: []ratelimit.Limit{ratelimit.PerSecond(1).TokenBucket(-1)}}},
		{"unknown algorithm", ratelimit.Request{Limits: []ratelimit.Limit{{Algorithm: 9, Count: 1, Window: minute}}}},
		{"second limit invalid", ratelimit.Request{Limits: []ratelimit.Limit{good, {Count: 1}}}},
		{"negative cost", ratelimit.Request{Limits: []ratelimit.Limit{good}, Cost: -1}},
	}
	for _, c := range cases {
		c.r.Key = "k"
		c.r.Now = At(0)
		_, err := s.Take(ctx, c.r)
		WantInvalid(t, c.name, err)
	}
	// The second-limit case must not have counted in the first.
	d, err := s.Take(ctx, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{good}, Now: At(0)})
	if err != nil || !d.Allowed {
		t.Fatalf("valid request after invalid ones: %s, %v; invalid requests must count nothing", describe(&d), err)
	}
}

func testInvalidLeases(t *testing.T, s ratelimit.LeaseStore) {
	ctx := context.Background()
	cases := []struct {
		name string
		r    ratelimit.LeaseRequest
	}{
		{"empty id", ratelimit.LeaseRequest{Max: 1, TTL: sec}},
		{"zero max", ratelimit.LeaseRequest{ID: "a", TTL: sec}},
		{"negative max", ratelimit.LeaseRequest{ID: "a", Max: -1, TTL: sec}},
		{"zero ttl", ratelimit.LeaseRequest{ID: "a", Max: 1}},
		{"sub-millisecond ttl", ratelimit.LeaseRequest{ID: "a", Max: 1, TTL: 1500 * time.Microsecond}},
	}
	for _, c := range cases {
		c.r.Key = "k"
		c.r.Now = At(0)
		_, err := s.Acquire(ctx, c.r)
		WantInvalid(t, c.name, err)
	}
}

// testKeysIndependent: keys that differ in one byte, in case, in a
// trailing space or NUL, or only in where a separator falls are distinct
// counters.
func testKeysIndependent(t *testing.T, s ratelimit.Store) {
	keys := []string{
		"user:1", "user:1 ", "User:1", "user:10", "user:", "user:1\x00", "{user:1}", "user:é",
		"", "*", "user:1|60", strings.Repeat("k", 1000), strings.Repeat("k", 1001),
		ratelimit.Key("a:b", "c"), ratelimit.Key("a", "b:c"), ratelimit.Key("a", ""), ratelimit.Key("a"),
	}
	one := []ratelimit.Limit{ratelimit.PerMinute(1).Fixed()}
	var steps []Step
	for _, k := range keys {
		steps = append(steps, Step{Key: k, Allowed: true, Remaining: []int64{0}})
	}
	for _, k := range keys {
		steps = append(steps, Step{At: sec, Key: k, Allowed: false})
	}
	// The empty Step.Key means the timeline's key, so the empty key is
	// played separately.
	for i := range steps {
		if steps[i].Key == "" {
			steps[i].Key = "\x00empty"
		}
	}
	Play(t, s, Timeline{Limits: one, Steps: steps})

	ctx := context.Background()
	r := ratelimit.Request{Key: "", Limits: one, Now: At(0)}
	for i, want := range []bool{true, false} {
		d, err := s.Take(ctx, r)
		if err != nil || d.Allowed != want {
			t.Fatalf("empty key, call %d: %s, %v; want allowed %v", i, describe(&d), err, want)
		}
	}
}

// testLeasesIndependentOfCounters: a lease key and a counter key of the
// same name do not see each other.
func testLeasesIndependentOfCounters(t *testing.T, s ratelimit.Store, ls ratelimit.LeaseStore) {
	ctx := context.Background()
	l, err := ls.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: "a", Max: 1, TTL: minute, Now: At(0)})
	if err != nil || !l.Allowed {
		t.Fatalf("Acquire: %+v, %v", l, err)
	}
	Play(t, s, Timeline{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1).Fixed()}, Steps: []Step{
		{At: 0, Allowed: true, Remaining: []int64{0}},
		{At: 0, Allowed: false},
	}})
	l, err = ls.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: "b", Max: 2, TTL: minute, Now: At(0)})
	if err != nil || !l.Allowed || l.Active != 2 {
		t.Fatalf("Acquire after Take: %+v, %v; want allowed with 2 active", l, err)
	}
}
