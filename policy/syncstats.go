package policy

import (
	"sort"

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
// that has not yet connected reports no cycle since it was opened. Stores
// built by RegistryOptions.NewRedisStore are not listed.
func (r *Registry) SyncTimings() []NamespaceSync {
	r.mu.Lock()
	var out []NamespaceSync
	for k, e := range r.stores {
		st, ok := e.store.(*redisstore.Store)
		if !ok || e.health == nil {
			continue // not a default Redis store
		}
		if t := st.SyncTiming(); t.Interval > 0 {
			out = append(out, NamespaceSync{Namespace: k.namespace, SyncTiming: t})
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// Namespace returns the namespace the leases live in.
func (c *Concurrency) Namespace() string { return c.key.namespace }
