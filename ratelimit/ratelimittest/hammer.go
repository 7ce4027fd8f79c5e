package ratelimittest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// HammerOptions sizes a Hammer run. Zero fields take their defaults.
type HammerOptions struct {
	// Goroutines is the number of concurrent callers. Default 8.
	Goroutines int
	// Calls is the number of calls each goroutine makes per phase.
	// Default 25.
	Calls int
	// Phases is the number of instants the calls are made at. Default 6.
	Phases int
}

func (o *HammerOptions) fill() {
	if o.Goroutines <= 0 {
		o.Goroutines = 8
	}
	if o.Calls <= 0 {
		o.Calls = 25
	}
	if o.Phases <= 0 {
		o.Phases = 6
	}
}

// Hammer sends many concurrent calls to one key of s and checks that
// concurrency changes nothing. The calls come in phases: every call of a
// phase carries the same Now, and a phase starts when the previous one has
// ended. The number of calls a phase admits then does not depend on the
// order the store serialised them in, so it must equal what a serial replay
// of the same calls through storekit.Apply admits:
//
//   - a fixed window admits exactly Count per window;
//   - a sliding window admits what its weighted rate allows;
//   - a token bucket admits what GCRA allows, and never more than
//     Burst + Count×T/Window in any interval T;
//   - several limits together admit what the tightest allows;
//   - concurrency leases (of a store that is also a ratelimit.LeaseStore)
//     are never more than Max alive, as seen by the holders themselves.
//
// Half the goroutines use Request.AllowOnly, and half of those Allow when
// s is a ratelimit.Allower. Each check uses its own key, so s may be shared
// with other tests.
func Hammer(t *testing.T, s ratelimit.Store, o HammerOptions) {
	o.fill()
	perPhase := int64(o.Goroutines * o.Calls)
	phases := func(step time.Duration) []time.Duration {
		ts := make([]time.Duration, o.Phases)
		for i := range ts {
			ts[i] = time.Duration(i) * step
		}
		return ts
	}
	t.Run("FixedWindow", func(t *testing.T) {
		l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Count: max(perPhase/2, 1), Window: time.Minute}
		got := hammerPhases(t, s, o, "hammer/fixed", []ratelimit.Limit{l}, phases(time.Minute+7*time.Second))
		for i, n := range got {
			if n != l.Count {
				t.Errorf("phase %d admitted %d calls, want exactly Count = %d", i, n, l.Count)
			}
		}
	})
	t.Run("SlidingWindow", func(t *testing.T) {
		l := ratelimit.Limit{Count: max(perPhase/3, 1), Window: time.Minute}
		hammerPhases(t, s, o, "hammer/sliding", []ratelimit.Limit{l}, phases(25*time.Second))
	})
	t.Run("TokenBucket", func(t *testing.T) {
		burst := max(perPhase/4, 1)
		l := ratelimit.PerSecond(burst).TokenBucket(burst)
		ts := phases(300 * time.Millisecond)
		got := hammerPhases(t, s, o, "hammer/bucket", []ratelimit.Limit{l}, ts)
		for i := range got {
			var sum int64
			for j := i; j < len(got); j++ {
				sum += got[j]
				bound := burst + l.Count*int64(ts[j]-ts[i])/int64(l.Window)
				if sum > bound {
					t.Errorf("phases %d..%d admitted %d calls, more than burst + rate×T = %d", i, j, sum, bound)
				}
			}
		}
	})
	t.Run("SeveralLimits", func(t *testing.T) {
		ls := []ratelimit.Limit{
			{Algorithm: ratelimit.FixedWindow, Count: max(perPhase/4, 1), Window: time.Second},
			{Count: max(perPhase, 1), Window: time.Minute},
		}
		hammerPhases(t, s, o, "hammer/several", ls, phases(700*time.Millisecond))
	})
	if ls, ok := s.(ratelimit.LeaseStore); ok {
		t.Run("Leases", func(t *testing.T) { hammerLeases(t, ls, o) })
	}
}

// hammerPhases runs the phases and compares each phase's admitted count
// with a serial replay; it returns the counts.
func hammerPhases(t *testing.T, s ratelimit.Store, o HammerOptions, key string, ls []ratelimit.Limit, ts []time.Duration) []int64 {
	t.Helper()
	ctx := context.Background()
	got := make([]int64, len(ts))
	model := make([]storekit.Counter, len(ls))
	for p, at := range ts {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range o.Goroutines {
			wg.Go(func() {
				<-start
				a, _ := s.(ratelimit.Allower)
				for range o.Calls {
					// Half the goroutines take the allow-only path, through
					// Allow when the store has it.
					r := ratelimit.Request{Key: key, Limits: ls, Now: At(at), AllowOnly: g%2 == 1}
					var allowed bool
					var err error
					if a != nil && g%4 == 3 {
						allowed, err = a.Allow(ctx, r)
					} else {
						var d ratelimit.Decision
						d, err = s.Take(ctx, r)
						allowed = d.Allowed
					}
					if err != nil {
						t.Errorf("phase %d: Take: %v", p, err)
						return
					}
					if allowed {
						admitted.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		got[p] = admitted.Load()

		var want int64
		for range o.Goroutines * o.Calls {
			r := ratelimit.Request{Key: key, Limits: ls, Now: At(at)}
			if d := storekit.Apply(&r, model); d.Allowed {
				want++
			}
		}
		if got[p] != want {
			t.Fatalf("phase %d (t0+%s): %d of %d concurrent calls admitted, a serial replay admits %d",
				p, at, got[p], o.Goroutines*o.Calls, want)
		}
	}
	return got
}

func hammerLeases(t *testing.T, s ratelimit.LeaseStore, o HammerOptions) {
	const maxLeases = 3
	ctx := context.Background()
	var live, granted atomic.Int64
	for p := range o.Phases {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range o.Goroutines {
			wg.Go(func() {
				<-start
				for i := range o.Calls {
					id := "g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
					r := ratelimit.LeaseRequest{Key: "hammer/leases", ID: id, Max: maxLeases, TTL: time.Hour, Now: At(time.Duration(p) * time.Second)}
					l, err := s.Acquire(ctx, r)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if !l.Allowed {
						continue
					}
					granted.Add(1)
					if n := live.Add(1); n > maxLeases {
						t.Errorf("%d leases held at once, Max is %d", n, maxLeases)
					}
					if l.Active > maxLeases || l.Active < 1 {
						t.Errorf("granted lease reports %d active, want 1..%d", l.Active, maxLeases)
					}
					live.Add(-1)
					if err := s.Release(ctx, r.Key, id); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if granted.Load() < maxLeases {
		t.Errorf("only %d leases granted in %d attempts", granted.Load(), o.Phases*o.Goroutines*o.Calls)
	}
	l, err := s.Acquire(ctx, ratelimit.LeaseRequest{Key: "hammer/leases", ID: "last", Max: maxLeases, TTL: time.Hour, Now: At(0)})
	if err != nil || !l.Allowed || l.Active != 1 {
		t.Errorf("after every lease was released: %+v, %v; want allowed with 1 active", l, err)
	}
}
