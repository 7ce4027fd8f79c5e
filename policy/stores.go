package policy

import (
	"encoding/json"
	"fmt"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// newDefaultLocalStore returns an in-process store for one namespace.
func newDefaultLocalStore(string) (ratelimit.Store, error) {
	return memorystore.New(memorystore.Options{}), nil
}

func newDefaultRedisStore(cfg RedisStoreConfig) (ratelimit.Store, error) {
	return nil, fmt.Errorf("%w: no redis store for namespace %q", ErrStrategyUnavailable, cfg.Namespace)
}

// redisFingerprint identifies a Redis config: stores (and clients) are
// shared by namespaces whose configs are equal.
func redisFingerprint(c *RedisConfig) string {
	b, _ := json.Marshal(c) // plain data always marshals
	return string(b)
}
