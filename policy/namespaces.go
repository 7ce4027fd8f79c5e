package policy

import (
	"fmt"
	"reflect"
)

// A NamespaceSet gives the rate-limiting-advanced instances of one
// configuration one counter store per namespace, as Kong does: the first
// instance of a namespace sets how its counters are kept (strategy,
// sync_rate, redis and sluice.redis_layout), and a later instance of the
// namespace configured otherwise counts with those settings too, not in a
// store of its own. Kong logs that case as an error; Settle returns one to
// log. The zero value is ready to use; a NamespaceSet is for one
// configuration build, by one goroutine.
type NamespaceSet struct {
	first map[string]namespaceFirst
}

type namespaceFirst struct {
	where string
	store namespaceStore
}

// namespaceStore is what decides an instance's counter store.
type namespaceStore struct {
	Strategy    string
	SyncRate    *float64
	Redis       RedisConfig
	RedisLayout string
}

func storeOf(c *AdvancedConfig) namespaceStore {
	return namespaceStore{Strategy: c.Strategy, SyncRate: c.SyncRate, Redis: c.Redis, RedisLayout: c.Sluice.RedisLayout}
}

// Settle gives cfg, the config of the instance at where (a path for the
// message), the store settings of its namespace's first instance. It
// returns an error naming both instances when cfg's own settings differed,
// nil otherwise.
func (s *NamespaceSet) Settle(cfg *AdvancedConfig, where string) error {
	if s.first == nil {
		s.first = make(map[string]namespaceFirst)
	}
	own := storeOf(cfg)
	f, ok := s.first[cfg.Namespace]
	if !ok {
		s.first[cfg.Namespace] = namespaceFirst{where, own}
		return nil
	}
	if reflect.DeepEqual(f.store, own) {
		return nil
	}
	cfg.Strategy, cfg.SyncRate, cfg.Redis, cfg.Sluice.RedisLayout = f.store.Strategy, f.store.SyncRate, f.store.Redis, f.store.RedisLayout
	return fmt.Errorf("rate-limiting-advanced at %s: namespace %q has other counter syncing settings (strategy, sync_rate, redis) "+
		"than at %s; it counts with those, as Kong does: give every instance of a namespace the same settings", where, cfg.Namespace, f.where)
}
