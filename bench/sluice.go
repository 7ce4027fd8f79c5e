package bench

import (
	"context"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// sluiceMaxKeys sizes sluice's memory store for the largest key set with
// room to spare: the bound is enforced per shard, and a shard that filled
// up would evict live keys and make the benchmark measure eviction.
const sluiceMaxKeys = 4_000_000

// SluiceContenders returns sluice's in-process store with each of its
// algorithms, one limit per call, time read per call (as the peers do).
func SluiceContenders() []Contender {
	return []Contender{
		{Name: "sluice-sliding", Keyed: true, New: sluiceMemory(ratelimit.SlidingWindow)},
		{Name: "sluice-fixed", Keyed: true, New: sluiceMemory(ratelimit.FixedWindow)},
		{Name: "sluice-token", Keyed: true, New: sluiceMemory(ratelimit.TokenBucket)},
	}
}

func sluiceMemory(alg ratelimit.Algorithm) func(count int64, window time.Duration) (Instance, error) {
	return func(count int64, window time.Duration) (Instance, error) {
		limits := []ratelimit.Limit{{Algorithm: alg, Count: count, Window: window}}
		if err := ratelimit.ValidateLimits(limits); err != nil {
			return Instance{}, err
		}
		s := memorystore.New(memorystore.Options{MaxKeys: sluiceMaxKeys})
		ctx := context.Background()
		return Instance{
			Allow: func(key string) (bool, error) {
				d, err := s.Take(ctx, ratelimit.Request{Key: key, Limits: limits})
				return d.Allowed, err
			},
			Keys:  s.Len,
			Close: func() { _ = s.Close() },
		}, nil
	}
}

// SluiceRedisContenders returns sluice's Redis store modes.
func SluiceRedisContenders() []RedisContender { return nil }
