package decision

import (
	"fmt"
	"log/slog"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// OpenStore opens the store sc selects. The memory store needs nothing to
// start. The Redis store connects first and fails when no node answers;
// once running, it decides with local counters while Redis is unreachable
// (see package redisstore), so a decision never fails for it.
func OpenStore(sc StoreConfig, logger *slog.Logger) (ratelimit.Store, error) {
	switch sc.Type {
	case "", "memory":
		return memorystore.New(memorystore.Options{MaxKeys: int(sc.Memory.MaxKeys)}), nil
	case "redis":
		return openRedis(sc.Redis, logger)
	}
	return nil, fmt.Errorf("%w: unknown store %q", ErrInvalidConfig, sc.Type)
}

// redisStore is a redisstore.Store that owns its client.
type redisStore struct {
	*redisstore.Store
	client *redisstore.Client
}

var _ ratelimit.Store = redisStore{}

func (s redisStore) Close() error {
	err := s.Store.Close()
	s.client.Close()
	return err
}

func openRedis(rc RedisConfig, logger *slog.Logger) (ratelimit.Store, error) {
	if rc.EnvoyLayout {
		return openEnvoyStore(rc)
	}
	c, err := redisstore.Dial(rc.Config)
	if err != nil {
		return nil, fmt.Errorf("decision: opening the redis store: %w", err)
	}
	st, err := redisstore.New(c, redisstore.Options{
		Namespace:   rc.Namespace,
		SyncRate:    rc.SyncRate,
		Timeout:     rc.Timeout,
		CallerClock: rc.ServiceClock,
		Logger:      logger,
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("decision: opening the redis store: %w", err)
	}
	return redisStore{Store: st, client: c}, nil
}
