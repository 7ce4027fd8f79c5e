package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// sluiceMaxKeys sizes sluice's memory store for the largest key set with
// room to spare: the bound is enforced per shard, and a shard that filled
// up would evict live keys and make the benchmark measure eviction.
const sluiceMaxKeys = 4_000_000

// SluiceContenders returns sluice's in-process store with each of its
// algorithms, one limit per call, through Limiter.Allow: time read per call
// (as the peers do), a bool answered (as the peers answer). A store error
// would count as allowed there, so the limiter holds room for every key
// (sluiceMaxKeys) and prepare checks that every key is held.
func SluiceContenders() []Contender {
	return []Contender{
		{Name: "sluice-sliding", Keyed: true, New: sluiceMemory(ratelimit.SlidingWindow)},
		{Name: "sluice-fixed", Keyed: true, New: sluiceMemory(ratelimit.FixedWindow)},
		{Name: "sluice-token", Keyed: true, New: sluiceMemory(ratelimit.TokenBucket)},
	}
}

func sluiceMemory(alg ratelimit.Algorithm) func(count int64, window time.Duration) (Instance, error) {
	return func(count int64, window time.Duration) (Instance, error) {
		s := memorystore.New(memorystore.Options{MaxKeys: sluiceMaxKeys})
		l, err := ratelimit.NewLimiter(s, ratelimit.LimiterOptions{}, ratelimit.Limit{Algorithm: alg, Count: count, Window: window})
		if err != nil {
			s.Close()
			return Instance{}, err
		}
		return Instance{
			Allow: func(key string) (bool, error) { return l.Allow(key), nil },
			Keys:  s.Len,
			Close: func() { _ = s.Close() },
		}, nil
	}
}

// sluiceRedisTimeout bounds each Redis call of the benchmarked stores:
// Kong's default Redis timeouts (2 s), rather than the store's 200 ms, so
// that a loaded benchmark machine does not push decisions onto the local
// fallback, whose figures would not be Redis' (runClosedLoop fails the
// benchmark when any decision falls back).
const sluiceRedisTimeout = 2 * time.Second

// SluiceRedisContenders returns sluice's Redis store in synchronous mode
// (Kong's sync_rate 0: every decision consults Redis) and in periodic mode
// (sync_rate 0.1: local counting, one pipelined push and pull of every
// key's hits each 100 ms).
func SluiceRedisContenders() []RedisContender {
	return []RedisContender{
		{Name: "sluice-sync", New: sluiceRedis(0)},
		{Name: "sluice-sync0.1", New: sluiceRedis(100 * time.Millisecond)},
	}
}

// sluiceRedis returns a constructor of sluice Redis stores syncing every
// syncRate. The store's connection pool is its own business (decisions are
// pipelined on shared connections), so callers does not size it.
func sluiceRedis(syncRate time.Duration) func(addr string, callers int, count int64, window time.Duration) (RedisInstance, error) {
	return func(addr string, _ int, count int64, window time.Duration) (RedisInstance, error) {
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return RedisInstance{}, fmt.Errorf("bench: redis address %q: %w", addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return RedisInstance{}, fmt.Errorf("bench: redis address %q: %w", addr, err)
		}
		limits := []ratelimit.Limit{{Count: count, Window: window}}
		if err := ratelimit.ValidateLimits(limits); err != nil {
			return RedisInstance{}, err
		}
		c, err := redisstore.NewClient(redisstore.Config{Host: host, Port: port})
		if err != nil {
			return RedisInstance{}, fmt.Errorf("bench: dialling redis: %w", err)
		}
		s, err := redisstore.New(c, redisstore.Options{Namespace: "bench", SyncRate: syncRate, Timeout: sluiceRedisTimeout})
		if err != nil {
			c.Close()
			return RedisInstance{}, fmt.Errorf("bench: creating redis store: %w", err)
		}
		return RedisInstance{
			Allow: func(ctx context.Context, key string) (bool, error) {
				d, err := s.Take(ctx, ratelimit.Request{Key: key, Limits: limits})
				return d.Allowed, err
			},
			Close: func() { _ = s.Close(); c.Close() },
			// A decision taken on local counters because Redis did not
			// answer in time would make the figures those of the
			// fallback, not of Redis.
			Check: func() error {
				if st := s.Stats(); st.LocalDecisions > 0 {
					return fmt.Errorf("bench: %d decisions fell back to local counters (%d redis calls failed)", st.LocalDecisions, st.RedisErrors)
				}
				return nil
			},
			// Failed sync cycles leave decisions local but counters
			// unshared; they are shown, not hidden.
			Metrics: func() map[string]float64 {
				st := s.Stats()
				return map[string]float64{"redis-errors": float64(st.RedisErrors), "syncs": float64(st.SyncCycles)}
			},
		}, nil
	}
}
