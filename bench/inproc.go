package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	svmemory "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	thmemstore "github.com/throttled/throttled/v2/store/memstore"
	ulimiter "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// An Instance is one in-process limiter under test, holding the limit it
// was built with for every key.
type Instance struct {
	// Allow counts one call for key and reports whether it was admitted.
	// It is safe for concurrent use.
	Allow func(key string) (bool, error)
	// Keys returns the number of keys the limiter holds, or -1 when the
	// limiter does not say.
	Keys func() int
	// Close stops the limiter's goroutines. It may be nil.
	Close func()
}

// A Contender builds Instances of one limiter.
type Contender struct {
	// Name is the sub-benchmark name.
	Name string
	// Keyed is false for a limiter that ignores the key (a single
	// x/time/rate Limiter): it only runs in the one-key scenario.
	Keyed bool
	// New returns a limiter that admits count calls per window for each key.
	New func(count int64, window time.Duration) (Instance, error)
}

// Never is a limit no benchmark reaches: 1e9 calls per second per key.
const Never = 1_000_000_000

func unknownKeys() int { return -1 }

// Contenders returns the peers, in report order. Sluice's own stores are
// appended by SluiceContenders.
func Contenders() []Contender {
	return []Contender{
		{Name: "harness", Keyed: true, New: newHarness},
		{Name: "xtime-one", Keyed: false, New: newXTimeOne},
		{Name: "xtime-map", Keyed: true, New: newXTimeMap},
		{Name: "xtime-syncmap", Keyed: true, New: newXTimeSyncMap},
		{Name: "sethvargo", Keyed: true, New: newSethvargo},
		{Name: "ulule", Keyed: true, New: newUlule},
		{Name: "throttled", Keyed: true, New: newThrottled},
	}
}

// newHarness admits everything without keeping state: its figures are the
// cost of the benchmark loop itself (drawing a key, calling through a func
// value).
func newHarness(int64, time.Duration) (Instance, error) {
	return Instance{Allow: func(string) (bool, error) { return true, nil }, Keys: unknownKeys}, nil
}

func xtimeLimit(count int64, window time.Duration) (rate.Limit, int) {
	return rate.Limit(float64(count) / window.Seconds()), int(count)
}

func newXTimeOne(count int64, window time.Duration) (Instance, error) {
	l := rate.NewLimiter(xtimeLimit(count, window))
	return Instance{
		Allow: func(string) (bool, error) { return l.Allow(), nil },
		Keys:  func() int { return 1 },
	}, nil
}

func newXTimeMap(count int64, window time.Duration) (Instance, error) {
	r, burst := xtimeLimit(count, window)
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return Instance{
		Allow: func(key string) (bool, error) {
			mu.Lock()
			l, ok := m[key]
			if !ok {
				l = rate.NewLimiter(r, burst)
				m[key] = l
			}
			mu.Unlock()
			return l.Allow(), nil
		},
		Keys: func() int { mu.Lock(); defer mu.Unlock(); return len(m) },
	}, nil
}

func newXTimeSyncMap(count int64, window time.Duration) (Instance, error) {
	r, burst := xtimeLimit(count, window)
	var m sync.Map
	return Instance{
		Allow: func(key string) (bool, error) {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(r, burst))
			}
			return v.(*rate.Limiter).Allow(), nil
		},
		Keys: func() int {
			n := 0
			m.Range(func(any, any) bool { n++; return true })
			return n
		},
	}, nil
}

func newSethvargo(count int64, window time.Duration) (Instance, error) {
	s, err := svmemory.New(&svmemory.Config{Tokens: uint64(count), Interval: window})
	if err != nil {
		return Instance{}, fmt.Errorf("bench: creating sethvargo memorystore: %w", err)
	}
	return Instance{
		Allow: func(key string) (bool, error) {
			_, _, _, ok, err := s.Take(context.Background(), key)
			return ok, err
		},
		Keys:  unknownKeys,
		Close: func() { _ = s.Close(context.Background()) },
	}, nil
}

func newUlule(count int64, window time.Duration) (Instance, error) {
	store := ulmemory.NewStoreWithOptions(ulimiter.StoreOptions{
		Prefix:          ulimiter.DefaultPrefix,
		CleanUpInterval: ulimiter.DefaultCleanUpInterval,
	})
	l := ulimiter.New(store, ulimiter.Rate{Period: window, Limit: count})
	return Instance{
		Allow: func(key string) (bool, error) {
			c, err := l.Get(context.Background(), key)
			return !c.Reached, err
		},
		Keys: unknownKeys,
	}, nil
}

// throttledCASAttempts bounds throttled's compare-and-swap retries.
const throttledCASAttempts = 1000

func newThrottled(count int64, window time.Duration) (Instance, error) {
	// The map store (maxKeys 0): the LRU variant serialises every call on
	// one lock.
	st, err := thmemstore.NewCtx(0)
	if err != nil {
		return Instance{}, fmt.Errorf("bench: creating throttled memstore: %w", err)
	}
	// Count calls per window, all of them at once: MaxBurst is the burst
	// beyond the first call.
	q := throttled.RateQuota{MaxRate: throttled.PerDuration(int(count), window), MaxBurst: int(count) - 1}
	l, err := throttled.NewGCRARateLimiterCtx(st, q)
	if err != nil {
		return Instance{}, fmt.Errorf("bench: creating throttled limiter: %w", err)
	}
	// With its default of 10 compare-and-swap attempts, two goroutines on
	// one hot key make throttled return errors; allow enough retries that
	// every call is decided.
	l.SetMaxCASAttemptsLimit(throttledCASAttempts)
	return Instance{
		Allow: func(key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(context.Background(), key, 1)
			return !limited, err
		},
		Keys: unknownKeys,
	}, nil
}
