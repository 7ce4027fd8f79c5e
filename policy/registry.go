package policy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// A Registry owns the counter stores of a process, keyed by namespace and
// store settings, and the pins of the reset rule. Limiters compiled from
// successive configs share it, so a reload that keeps a namespace and its
// strategy keeps the counters: build the new limiter, swap it in, then
// Close the old one.
//
// Create one Registry per process with NewRegistry and Close it at exit. A
// Registry is safe for concurrent use.
type Registry struct {
	opts RegistryOptions

	mu      sync.Mutex
	stores  map[storeKey]*storeEntry
	clients map[string]*redisClient // by Redis config fingerprint
	closed  bool

	pins pinTable

	// healthMu guards degraded: per namespace, the number of default
	// Redis stores counting locally (see namespaceHealth).
	healthMu sync.Mutex
	degraded map[string]int

	// tops holds the top-list sketches by instance identity, so that a
	// reload that rebuilds an instance keeps its list (see topFor).
	topMu sync.Mutex
	tops  map[string]*topRef
}

// A Store counts and keeps concurrency leases: what a namespace's store
// does for every policy. memorystore and redisstore stores are Stores.
type Store interface {
	ratelimit.Store
	ratelimit.LeaseStore
}

// RegistryOptions configures a Registry. The zero value is ready to use.
type RegistryOptions struct {
	// NewLocalStore builds the store of one namespace of the local strategy
	// (and of cluster, which sluice runs as local). Nil means the default
	// in-process store.
	NewLocalStore func(namespace string) (Store, error)
	// NewRedisStore builds the store of one namespace of the redis strategy.
	// Nil means the default Redis store, which shares one client per
	// distinct Redis config.
	NewRedisStore func(cfg RedisStoreConfig) (Store, error)
	// Rand returns a uniform number in [0, 1) for the Retry-After jitter.
	// Nil means math/rand/v2's Float64. It must be safe for concurrent use.
	Rand func() float64
	// RedisCallerClock makes the default Redis stores' scripts (token
	// buckets, leases) decide with Request.Now instead of Redis' TIME (one
	// clock for every node, the default); window limits always take their
	// window from Request.Now, as Kong does. Tests with an injected clock
	// set it. The OSS plugin's stores always use the caller's clock (its
	// calendar periods need it).
	RedisCallerClock bool
	// Logger receives the default Redis stores' state changes (fallback to
	// local counters and back); nil discards them.
	Logger *slog.Logger
	// OnRedisState, when set, is called once per change of a namespace's
	// Redis state, in order: degraded true, with the cause, when the
	// namespace starts counting locally because Redis does not answer (a
	// store connects on its first call, so a Redis down at start is
	// reported by that call); degraded false when Redis answers again. While degraded, a
	// new cause (Redis down, then up but refusing the password: see
	// redisstore.Classify) is reported again with degraded true. Probing a
	// failed Redis for the same cause is not a change. A namespace is degraded while any of its
	// open default Redis stores is (a reload that changes its Redis config
	// briefly has two), so closing the last degraded store, say after a
	// reload that fixed the Redis address, reports false too. It must not
	// block or call into the Registry: it may run while a store or the
	// Registry is locked. Stores built by NewRedisStore report nothing
	// through it.
	OnRedisState func(namespace string, degraded bool, err error)
	// RedisTimeout bounds every call of the default Redis stores; a
	// decision whose call does not return in time is decided with local
	// counters. Zero means the store's default (200 ms).
	RedisTimeout time.Duration
	// TopKeys is how many identifiers each rate-limiting instance tracks
	// per ten seconds for its top list (see Advanced.Top): its memory is
	// six times that many entries of about 100 bytes, whatever the
	// traffic. Zero means DefaultTopKeys (128); a negative value keeps no
	// top lists.
	TopKeys int
	// RedisTLS is the base TLS configuration of the default Redis clients
	// when a config sets ssl: the root CAs that ssl_verify checks against
	// (Kong's lua_ssl_trusted_certificate) and client certificates. Nil
	// means the system roots. It is cloned, never modified.
	RedisTLS *tls.Config
}

// RedisStoreConfig is what a Redis store of one namespace is built from.
type RedisStoreConfig struct {
	Namespace string
	Redis     RedisConfig
	// SyncRate is Kong's sync_rate in seconds: 0 synchronous, > 0 periodic,
	// -1 never (node-local counting).
	SyncRate float64
	// Windows are the window sizes the namespace's configs use (plugin
	// windows and consumer-group override windows), for stores that fetch
	// whole windows. Windows of Request.Quota are not known in advance and
	// not listed: the default Redis store syncs every counter it holds,
	// whatever its window.
	Windows []time.Duration
	// CallerClock asks the store to decide with Request.Now rather than a
	// server clock.
	CallerClock bool
	// KongLayout asks for Kong's Redis layout, shared with Kong nodes
	// (Extensions.RedisLayout "kong").
	KongLayout bool
	// Strict asks for a store that fails a call Redis does not answer
	// (an error wrapping redisstore.ErrUnavailable) instead of deciding it
	// with local counters: rate-limiting's fault_tolerant false.
	Strict bool
	// Timeout bounds each call of the default Redis store; zero means
	// RegistryOptions.RedisTimeout.
	Timeout time.Duration
}

type storeKey struct {
	namespace string
	backend   string // "local", or "redis" and the fingerprint of its config
}

type storeEntry struct {
	store Store
	refs  int
	// health follows a default Redis store's state; nil for other stores.
	health *redisHealth
	// release, when not nil, gives back what the store borrowed from the
	// Registry (a shared Redis client) once the store is closed.
	release func()
}

// closeEntry closes e's store and gives back what it borrowed.
func closeEntry(e *storeEntry) error {
	err := e.store.Close()
	if e.release != nil {
		e.release()
	}
	return err
}

// NewRegistry returns an empty Registry.
func NewRegistry(opts RegistryOptions) *Registry {
	r := &Registry{opts: opts, stores: make(map[storeKey]*storeEntry), clients: make(map[string]*redisClient),
		degraded: make(map[string]int)}
	if r.opts.Rand == nil {
		r.opts.Rand = mrand.Float64
	}
	r.pins.init()
	return r
}

// acquire returns the store for key, building it with build on first use,
// and takes a reference that release gives back. build returns the entry
// of the new store with no reference.
func (r *Registry) acquire(k storeKey, build func() (*storeEntry, error)) (Store, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if e, ok := r.stores[k]; ok {
		e.refs++
		return e.store, nil
	}
	e, err := build()
	if err != nil {
		return nil, err
	}
	e.refs = 1
	r.stores[k] = e
	return e.store, nil
}

// release gives back a reference; the store is closed with the last one.
func (r *Registry) release(k storeKey) error {
	r.mu.Lock()
	e, ok := r.stores[k]
	if !ok || r.closed {
		r.mu.Unlock()
		return nil
	}
	e.refs--
	if e.refs > 0 {
		r.mu.Unlock()
		return nil
	}
	delete(r.stores, k)
	r.mu.Unlock()
	r.pins.dropNamespace(k.namespace)
	if err := closeEntry(e); err != nil {
		return fmt.Errorf("policy: closing store of namespace %q: %w", k.namespace, err)
	}
	return nil
}

// Close closes every store. Limiters bound to the Registry fail with
// ErrClosed afterwards (stores report their own closed error).
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	stores := r.stores
	r.stores = nil
	r.mu.Unlock()
	var errs []error
	for k, e := range stores {
		if err := closeEntry(e); err != nil {
			errs = append(errs, fmt.Errorf("policy: closing store of namespace %q: %w", k.namespace, err))
		}
	}
	// Stores built by the default Redis factory gave their clients back
	// while closing; close any a failed build left behind.
	r.mu.Lock()
	for fp, c := range r.clients {
		c.c.Close()
		delete(r.clients, fp)
	}
	r.mu.Unlock()
	return errors.Join(errs...)
}

// storeFor returns the store of a namespace with the given strategy.
// cfg.Redis is used by the redis strategy only.
func (r *Registry) storeFor(strategy string, cfg RedisStoreConfig) (storeKey, Store, error) {
	namespace := cfg.Namespace
	switch strategy {
	case StrategyLocal, StrategyCluster:
		k := storeKey{namespace: namespace, backend: StrategyLocal}
		s, err := r.acquire(k, func() (*storeEntry, error) {
			newStore := newDefaultLocalStore
			if r.opts.NewLocalStore != nil {
				newStore = r.opts.NewLocalStore
			}
			s, err := newStore(namespace)
			return &storeEntry{store: s}, err
		})
		return k, s, err
	case StrategyRedis:
		k := storeKey{namespace: namespace, backend: "redis " + redisFingerprint(&cfg.Redis) +
			" sync " + strconv.FormatFloat(cfg.SyncRate, 'g', -1, 64) + " kong " + strconv.FormatBool(cfg.KongLayout) +
			" strict " + strconv.FormatBool(cfg.Strict) + " timeout " + cfg.Timeout.String()}
		s, err := r.acquire(k, func() (*storeEntry, error) {
			if r.opts.NewRedisStore != nil {
				s, err := r.opts.NewRedisStore(cfg)
				return &storeEntry{store: s}, err
			}
			return r.newDefaultRedisStore(cfg)
		})
		return k, s, err
	}
	return storeKey{}, nil, fmt.Errorf("%w: %q", ErrStrategyUnavailable, strategy)
}
