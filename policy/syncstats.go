package policy

import (
	"sort"
	"time"

	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// NamespaceSync is the periodic sync of one namespace's Redis store (a
// rate-limiting-advanced namespace with sync_rate > 0).
type NamespaceSync struct {
	Namespace string
	redisstore.SyncTiming
}

// SyncTimings returns the sync timing of every open default Redis store
// that syncs periodically, sorted by namespace. A namespace has two while
// a reload that changed its Redis settings closes the old one. A store
// still waiting for its first connection reports no cycle since it was
// opened. Stores built by RegistryOptions.NewRedisStore are not listed.
func (r *Registry) SyncTimings() []NamespaceSync {
	r.mu.Lock()
	var out []NamespaceSync
	for k, e := range r.stores {
		if t, ok := syncTiming(e.store); ok {
			out = append(out, NamespaceSync{Namespace: k.namespace, SyncTiming: t})
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

func syncTiming(s Store) (redisstore.SyncTiming, bool) {
	switch s := s.(type) {
	case sharedRedisStore:
		t := s.SyncTiming()
		return t, t.Interval > 0
	case *dialingStore:
		if p := s.redis.Load(); p != nil {
			return syncTiming(*p)
		}
		if s.cfg.SyncRate <= 0 {
			return redisstore.SyncTiming{}, false
		}
		return redisstore.SyncTiming{Interval: time.Duration(s.cfg.SyncRate * float64(time.Second)), Opened: s.opened}, true
	}
	return redisstore.SyncTiming{}, false
}

// Namespace returns the namespace the leases live in.
func (c *Concurrency) Namespace() string { return c.key.namespace }
