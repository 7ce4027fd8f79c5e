package memorystore

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// call is one concurrent Take and its outcome.
type call struct {
	phase   int
	cost    int64
	allowed bool
}

// storm sends goroutines × calls Take calls of random cost (1..4) to one
// key in each phase; every call of a phase carries the phase's time, and a
// phase starts when the previous one has ended. It returns every call.
func storm(t *testing.T, s *Store, seed uint64, key string, ls []ratelimit.Limit, times []time.Duration) []call {
	t.Helper()
	const goroutines, calls = 8, 20
	var mu sync.Mutex
	var out []call
	for p, at := range times {
		var wg sync.WaitGroup
		for g := range goroutines {
			rng := rand.New(rand.NewPCG(seed, uint64(p*goroutines+g)))
			wg.Go(func() {
				var mine []call
				for range calls {
					cost := 1 + rng.Int64N(4)
					d, err := s.Take(ctx, ratelimit.Request{Key: key, Limits: ls, Cost: cost, Now: ratelimittest.At(at)})
					if err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					mine = append(mine, call{p, cost, d.Allowed})
				}
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	var allowed int
	for _, c := range out {
		if c.allowed {
			allowed++
		}
	}
	if allowed == 0 || allowed == len(out) {
		t.Errorf("%d of %d calls allowed: the storm does not test the limit", allowed, len(out))
	}
	return out
}

// randomTimes returns n increasing offsets: steps of random size, from
// none (a second burst at the same instant) to more than a window.
func randomTimes(rng *rand.Rand, n int) []time.Duration {
	steps := []time.Duration{0, time.Millisecond, 300 * time.Millisecond, time.Second, 7 * time.Second, 20 * time.Second, time.Minute, 61 * time.Second}
	ts := make([]time.Duration, n)
	for i := 1; i < n; i++ {
		ts[i] = ts[i-1] + steps[rng.IntN(len(steps))]
	}
	return ts
}

// Under many goroutines with random costs, a fixed window admits at most
// Count units per window, and never turns away a call that still fitted
// when the window's traffic ended (room only shrinks within a window).
func TestRandomizedFixedWindow(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 1))
		l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Count: 5 + rng.Int64N(100), Window: time.Minute}
		times := randomTimes(rng, 12)
		s := New(Options{Shards: 2})
		calls := storm(t, s, seed, "k", []ratelimit.Limit{l}, times)
		s.Close()

		window := func(p int) int64 { return ratelimittest.At(times[p]).UnixNano() / int64(l.Window) }
		used := map[int64]int64{}
		for _, c := range calls {
			if c.allowed {
				used[window(c.phase)] += c.cost
			}
		}
		for w, u := range used {
			if u > l.Count {
				t.Errorf("seed %d: window %d admitted %d units, Count is %d", seed, w, u, l.Count)
			}
		}
		for _, c := range calls {
			if room := l.Count - used[window(c.phase)]; !c.allowed && c.cost <= room {
				t.Errorf("seed %d: a call of cost %d was denied, yet %d units were left at the window's end", seed, c.cost, room)
			}
		}
	}
}

// The same for a sliding window: at the end of every phase the weighted
// rate is within Count, and no denied call would have fitted then.
func TestRandomizedSlidingWindow(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 2))
		l := ratelimit.Limit{Count: 5 + rng.Int64N(100), Window: time.Minute}
		times := randomTimes(rng, 12)
		s := New(Options{Shards: 2})
		calls := storm(t, s, seed, "k", []ratelimit.Limit{l}, times)
		s.Close()

		w := l.Window.Milliseconds()
		used := map[int64]int64{} // window index -> admitted units
		for _, c := range calls {
			if c.allowed {
				used[ratelimittest.At(times[c.phase]).UnixMilli()/w] += c.cost
			}
		}
		// Phases are in time order, and every call of a phase is decided
		// before the next phase starts, so the count a phase ends with is
		// all admitted calls up to it.
		for p, at := range times {
			ms := ratelimittest.At(at).UnixMilli()
			win, e := ms/w, ms%w
			var cur int64
			for _, c := range calls {
				if c.allowed && c.phase <= p && ratelimittest.At(times[c.phase]).UnixMilli()/w == win {
					cur += c.cost
				}
			}
			prev := used[win-1]
			// rate × w = cur×w + prev×(w−e), compared in integers.
			rate := func(extra int64) int64 { return (cur+extra)*w + prev*(w-e) }
			if rate(0) > l.Count*w {
				t.Errorf("seed %d phase %d: rate %.3f above Count %d", seed, p, float64(rate(0))/float64(w), l.Count)
			}
			for _, c := range calls {
				if c.phase == p && !c.allowed && rate(c.cost) <= l.Count*w {
					t.Errorf("seed %d phase %d: a call of cost %d was denied but fits at the phase's end", seed, p, c.cost)
				}
			}
		}
	}
}

// A token bucket hit by random costs never admits more than
// Burst + Count×T/Window units in any interval T.
func TestRandomizedTokenBucket(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 3))
		burst := 4 + rng.Int64N(40)
		l := ratelimit.Every(1+rng.Int64N(50), time.Second).TokenBucket(burst)
		steps := []time.Duration{0, time.Millisecond, 37 * time.Millisecond, 250 * time.Millisecond, time.Second}
		times := make([]time.Duration, 15)
		for i := 1; i < len(times); i++ {
			times[i] = times[i-1] + steps[rng.IntN(len(steps))]
		}
		s := New(Options{Shards: 2})
		calls := storm(t, s, seed, "k", []ratelimit.Limit{l}, times)
		s.Close()

		perPhase := make([]int64, len(times))
		for _, c := range calls {
			if c.allowed {
				perPhase[c.phase] += c.cost
			}
		}
		for i := range times {
			var sum int64
			for j := i; j < len(times); j++ {
				sum += perPhase[j]
				if bound := burst + l.Count*int64(times[j]-times[i])/int64(l.Window); sum > bound {
					t.Errorf("seed %d: %d units admitted within %s, bound %d", seed, sum, times[j]-times[i], bound)
				}
			}
		}
	}
}

// Goroutines that acquire leases from a small pool of ids (so renewals
// happen), sometimes release them and sometimes let them lapse, never see
// more than Max leases alive. Each goroutine runs its own clock, so calls
// also arrive out of time order.
func TestRandomizedLeases(t *testing.T) {
	const maxLeases, ttl = 4, 2 * time.Second
	s := New(Options{Shards: 2})
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		rng := rand.New(rand.NewPCG(uint64(g), 4))
		wg.Go(func() {
			for i := range 200 {
				now := ratelimittest.At(time.Duration(i) * 100 * time.Millisecond)
				id := "id" + strconv.Itoa(rng.IntN(12))
				l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "k", ID: id, Max: maxLeases, TTL: ttl, Now: now})
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if l.Active > maxLeases || l.Active < 0 || l.Remaining != maxLeases-l.Active {
					t.Errorf("lease %+v: Active must stay within 0..%d and Remaining be Max-Active", l, maxLeases)
				}
				if l.Allowed && !l.Expires.Equal(now.Add(ttl)) {
					t.Errorf("granted lease expires at %s, want %s", l.Expires, now.Add(ttl))
				}
				if !l.Allowed && l.RetryAfter <= 0 {
					t.Errorf("denied lease has RetryAfter %s, want it positive", l.RetryAfter)
				}
				if l.Allowed && rng.IntN(3) == 0 {
					if err := s.Release(ctx, "k", id); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
}
