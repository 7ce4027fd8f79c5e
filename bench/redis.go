package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulimiter "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// A RedisInstance is one Redis-backed limiter under test.
type RedisInstance struct {
	// Allow counts one call for key and reports whether it was admitted.
	// It is safe for concurrent use.
	Allow func(ctx context.Context, key string) (bool, error)
	// Close releases the limiter's connections and goroutines.
	Close func()
	// Check, when set, reports whether the calls since the instance was
	// built were decided the way the contender claims (for example, by
	// Redis and not by a local fallback). It may be nil.
	Check func() error
	// Metrics, when set, returns counters the instance keeps about itself
	// (unit -> value since it was built), reported beside the figures. It
	// may be nil.
	Metrics func() map[string]float64
}

// A RedisContender builds RedisInstances of one limiter.
type RedisContender struct {
	// Name is the sub-benchmark name.
	Name string
	// New returns a limiter on the Redis server at addr that admits count
	// calls per window for each key, sized for callers concurrent callers.
	New func(addr string, callers int, count int64, window time.Duration) (RedisInstance, error)
}

// RedisContenders returns the Redis peers; sluice's Redis store modes are
// appended by SluiceRedisContenders.
func RedisContenders() []RedisContender {
	return []RedisContender{
		{Name: "redis_rate", New: newRedisRate},
		{Name: "ulule-redis", New: newUluleRedis},
	}
}

// goRedisClient returns a go-redis client with one connection per caller:
// the peers are given the pool that suits a closed-loop caller best.
func goRedisClient(addr string, callers int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: callers, MinIdleConns: callers})
}

func newRedisRate(addr string, callers int, count int64, window time.Duration) (RedisInstance, error) {
	rdb := goRedisClient(addr, callers)
	l := redis_rate.NewLimiter(rdb)
	lim := redis_rate.Limit{Rate: int(count), Burst: int(count), Period: window}
	return RedisInstance{
		Allow: func(ctx context.Context, key string) (bool, error) {
			res, err := l.Allow(ctx, key, lim)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		},
		Close: func() { _ = rdb.Close() },
	}, nil
}

func newUluleRedis(addr string, callers int, count int64, window time.Duration) (RedisInstance, error) {
	rdb := goRedisClient(addr, callers)
	store, err := ulredis.NewStoreWithOptions(rdb, ulimiter.StoreOptions{
		Prefix:   ulimiter.DefaultPrefix,
		MaxRetry: ulimiter.DefaultMaxRetry,
	})
	if err != nil {
		_ = rdb.Close()
		return RedisInstance{}, fmt.Errorf("bench: creating ulule redis store: %w", err)
	}
	l := ulimiter.New(store, ulimiter.Rate{Period: window, Limit: count})
	return RedisInstance{
		Allow: func(ctx context.Context, key string) (bool, error) {
			c, err := l.Get(ctx, key)
			return !c.Reached, err
		},
		Close: func() { _ = rdb.Close() },
	}, nil
}
