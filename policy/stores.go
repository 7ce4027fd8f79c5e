package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// newDefaultLocalStore returns an in-process store for one namespace.
func newDefaultLocalStore(string) (Store, error) {
	return memorystore.New(memorystore.Options{}), nil
}

// redisFingerprint identifies a Redis config: clients are shared by
// namespaces whose configs are equal.
func redisFingerprint(c *RedisConfig) string {
	b, _ := json.Marshal(c) // plain data always marshals
	return string(b)
}

// redisClient is a Redis client shared by the stores of every namespace
// with the same Redis config.
type redisClient struct {
	c    *redisstore.Client
	refs int
}

// sharedRedisStore is a namespace's Redis store; closing it gives back its
// reference on the shared client.
type sharedRedisStore struct {
	*redisstore.Store
	health  *redisHealth
	release func()
}

func (s sharedRedisStore) Close() error {
	err := s.Store.Close()
	s.health.close()
	s.release()
	return err
}

// redisHealth follows whether one default Redis store counts locally,
// for RegistryOptions.OnRedisState.
type redisHealth struct {
	r  *Registry
	ns string

	mu       sync.Mutex
	degraded bool
	reason   string // of the fault that degraded it, "" for none
	closed   bool
	since    time.Time // of the last change of degraded
}

// set records the store's state; only a change, or a new fault while
// degraded, is passed on.
func (h *redisHealth) set(degraded bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	reason := ""
	if f := redisstore.Classify(err); f != nil {
		reason = f.Reason
	}
	if h.degraded == degraded {
		if degraded && reason != h.reason {
			h.reason = reason
			h.r.faultChanged(h.ns, err)
		}
		return
	}
	h.degraded, h.reason, h.since = degraded, reason, time.Now()
	h.r.namespaceHealth(h.ns, degraded, err)
}

// faultChanged reports a new cause for a degraded namespace.
func (r *Registry) faultChanged(ns string, err error) {
	if r.opts.OnRedisState != nil {
		r.opts.OnRedisState(ns, true, err)
	}
}

// close withdraws the store from its namespace's state: a closed store no
// longer keeps the namespace degraded.
func (h *redisHealth) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	if h.degraded {
		h.r.namespaceHealth(h.ns, false, nil)
	}
}

// namespaceHealth counts the degraded default Redis stores of a namespace
// (during a reload the old and the new store may both be open) and reports
// to OnRedisState when the first one degrades and when the last one
// answers again or closes.
func (r *Registry) namespaceHealth(ns string, degraded bool, err error) {
	r.healthMu.Lock()
	defer r.healthMu.Unlock()
	n := r.degraded[ns]
	if degraded {
		n++
	} else {
		n--
	}
	if n <= 0 {
		delete(r.degraded, ns)
	} else {
		r.degraded[ns] = n
	}
	if r.opts.OnRedisState == nil {
		return
	}
	switch {
	case degraded && n == 1:
		r.opts.OnRedisState(ns, true, err)
	case !degraded && n == 0:
		r.opts.OnRedisState(ns, false, nil)
	}
}

// newDefaultRedisStore builds a namespace's Redis store over the client
// shared by its Redis config, dialling it on first use. Called with r.mu
// held (from acquire).
//
// A config the client rejects is an error. A Redis that does not answer
// is not: the namespace then counts locally, as Kong does while Redis is
// down, and a goroutine owned by the store dials again every second until
// it connects (see dialingStore).
func (r *Registry) newDefaultRedisStore(cfg RedisStoreConfig) (Store, error) {
	fp := redisFingerprint(&cfg.Redis)
	if _, ok := r.clients[fp]; !ok {
		// The first dial may take the whole connect timeout (a Redis that
		// accepts and never answers); the caller waits at most one call
		// timeout for it, then counts locally while it goes on.
		pending := make(chan dialResult, 1)
		go func() {
			c, err := redisstore.Dial(r.redisConfig(&cfg.Redis))
			pending <- dialResult{c, err}
		}()
		t := time.NewTimer(r.callTimeout())
		defer t.Stop()
		var err error
		select {
		case d := <-pending:
			if errors.Is(d.err, redisstore.ErrConfig) {
				return nil, d.err
			}
			if d.err == nil {
				r.clients[fp] = &redisClient{c: d.c}
				return r.redisStoreLocked(cfg, fp)
			}
			err, pending = d.err, nil
		case <-t.C:
			err = fmt.Errorf("redis did not answer within %s", r.callTimeout())
		}
		if f := redisstore.Classify(err); f != nil && r.opts.Logger != nil {
			r.opts.Logger.Error("policy: redis refuses the configuration, counting locally until it answers",
				"namespace", cfg.Namespace, "reason", f.Reason, "setting", "config.redis."+f.Setting, "error", err)
		} else if r.opts.Logger != nil {
			r.opts.Logger.Warn("policy: redis unreachable, counting locally until it answers",
				"namespace", cfg.Namespace, "error", err)
		}
		s := newDialingStore(r, cfg, fp, pending)
		s.health.set(true, err)
		return s, nil
	}
	return r.redisStoreLocked(cfg, fp)
}

// dialResult is the outcome of one redisstore.Dial.
type dialResult struct {
	c   *redisstore.Client
	err error
}

// callTimeout is the bound of one call of the default Redis stores.
func (r *Registry) callTimeout() time.Duration {
	if r.opts.RedisTimeout > 0 {
		return r.opts.RedisTimeout
	}
	return defaultRedisCallTimeout
}

// defaultRedisCallTimeout is redisstore's default Options.Timeout.
const defaultRedisCallTimeout = 200 * time.Millisecond

// redisStoreLocked builds a store over the registered client of fp.
// Called with r.mu held.
func (r *Registry) redisStoreLocked(cfg RedisStoreConfig, fp string) (Store, error) {
	rc := r.clients[fp]
	syncRate := redisstore.LocalOnly
	if cfg.SyncRate >= 0 {
		syncRate = time.Duration(cfg.SyncRate * float64(time.Second))
	}
	health := &redisHealth{r: r, ns: cfg.Namespace, since: time.Now()}
	st, err := redisstore.New(rc.c, redisstore.Options{
		Namespace:   cfg.Namespace,
		SyncRate:    syncRate,
		CallerClock: r.opts.RedisCallerClock || cfg.CallerClock,
		KongLayout:  cfg.KongLayout,
		Timeout:     r.opts.RedisTimeout,
		Logger:      r.opts.Logger,
		OnStateChange: func(_, to redisstore.State, err error) {
			// Fallback and probing are both "counting locally".
			health.set(to != redisstore.StateConnected, err)
		},
	})
	if err != nil {
		if rc.refs == 0 {
			rc.c.Close()
			delete(r.clients, fp)
		}
		return nil, err
	}
	rc.refs++
	return sharedRedisStore{Store: st, health: health, release: func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		rc.refs--
		if rc.refs == 0 {
			rc.c.Close()
			delete(r.clients, fp)
		}
	}}, nil
}

func (r *Registry) redisConfig(c *RedisConfig) redisstore.Config {
	rc := redisstoreConfig(c)
	rc.TLSConfig = r.opts.RedisTLS
	return rc
}

// redialInterval is how often a namespace whose Redis did not answer
// dials again.
const redialInterval = time.Second

// dialingStore is the store of a Redis namespace whose Redis did not
// answer when the namespace was opened. It decides with local counters
// until a dial succeeds, then with the Redis store for good. Its goroutine
// is stopped by Close.
type dialingStore struct {
	r     *Registry
	cfg   RedisStoreConfig
	fp    string
	local *memorystore.Store
	redis atomic.Pointer[Store]
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// health is degraded until the store uses Redis.
	health *redisHealth
	// connected is closed once the store uses Redis.
	connected chan struct{}
	// opened is when the namespace was opened (see SyncTimings).
	opened time.Time
}

var _ Store = (*dialingStore)(nil)

// newDialingStore starts the store; pending, when not nil, is a dial
// still under way, whose result the store takes first.
func newDialingStore(r *Registry, cfg RedisStoreConfig, fp string, pending <-chan dialResult) *dialingStore {
	s := &dialingStore{r: r, cfg: cfg, fp: fp, local: memorystore.New(memorystore.Options{}),
		stop: make(chan struct{}), done: make(chan struct{}), connected: make(chan struct{}),
		health: &redisHealth{r: r, ns: cfg.Namespace, since: time.Now()}, opened: time.Now()}
	go s.loop(pending)
	return s
}

func (s *dialingStore) loop(pending <-chan dialResult) {
	defer close(s.done)
	if pending != nil {
		select {
		case <-s.stop:
			// Close waits for the dial: it owns the client it may return.
			if d := <-pending; d.c != nil {
				d.c.Close()
			}
			return
		case d := <-pending:
			if d.err == nil && s.use(d.c) {
				return
			}
		}
	}
	t := time.NewTicker(redialInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.connect() {
			return
		}
	}
}

// connect dials once; it reports whether the store now uses Redis (or
// should stop trying because the registry closed).
func (s *dialingStore) connect() bool {
	c, err := redisstore.Dial(s.r.redisConfig(&s.cfg.Redis))
	if err != nil {
		return false
	}
	return s.use(c)
}

// use switches the store to Redis over c; it reports whether the store
// now uses Redis (or should stop trying because the registry closed).
func (s *dialingStore) use(c *redisstore.Client) bool {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.closed {
		c.Close()
		return true
	}
	if _, ok := s.r.clients[s.fp]; ok {
		c.Close() // another namespace connected first: share its client
	} else {
		s.r.clients[s.fp] = &redisClient{c: c}
	}
	st, err := s.r.redisStoreLocked(s.cfg, s.fp)
	if err != nil {
		return false
	}
	s.redis.Store(&st)
	close(s.connected)
	if s.r.opts.Logger != nil {
		s.r.opts.Logger.Info("policy: redis answers, namespace counts in redis", "namespace", s.cfg.Namespace)
	}
	s.health.set(false, nil)
	return true
}

func (s *dialingStore) current() Store {
	if p := s.redis.Load(); p != nil {
		return *p
	}
	return s.local
}

func (s *dialingStore) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	return s.current().Take(ctx, r)
}

func (s *dialingStore) Acquire(ctx context.Context, r ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	return s.current().Acquire(ctx, r)
}

// Release releases in both stores: a lease taken before the switch to
// Redis lives in the local one.
func (s *dialingStore) Release(ctx context.Context, key, id string) error {
	err := s.local.Release(ctx, key, id)
	if p := s.redis.Load(); p != nil {
		err = errors.Join(err, (*p).Release(ctx, key, id))
	}
	return err
}

// Close stops the dialling goroutine and closes both stores.
func (s *dialingStore) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.health.close()
		err = s.local.Close()
		if p := s.redis.Load(); p != nil {
			err = errors.Join(err, (*p).Close())
		}
	})
	return err
}

// redisstore maps a cloud_authentication record onto the store's; nil
// or a null auth_provider means none.
func (c *CloudAuth) redisstore() *redisstore.CloudAuth {
	if c == nil || c.AuthProvider == nil {
		return nil
	}
	return &redisstore.CloudAuth{
		Provider:           *c.AuthProvider,
		AWSCacheName:       deref(c.AWSCacheName),
		AWSRegion:          deref(c.AWSRegion),
		AWSServerless:      c.AWSIsServerless,
		AWSAccessKeyID:     deref(c.AWSAccessKeyID),
		AWSSecretAccessKey: deref(c.AWSSecretAccessKey),
		AWSAssumeRoleARN:   deref(c.AWSAssumeRoleARN),
		AWSRoleSessionName: deref(c.AWSRoleSessionName),

		GCPServiceAccountJSON: deref(c.GCPServiceAccountJSON),

		AzureClientID:     deref(c.AzureClientID),
		AzureClientSecret: deref(c.AzureClientSecret),
		AzureTenantID:     deref(c.AzureTenantID),
	}
}

// redisstoreConfig maps Kong's Redis record onto the store's config.
func redisstoreConfig(c *RedisConfig) redisstore.Config {
	ms := func(p *int64) time.Duration {
		if p == nil {
			return 0
		}
		return time.Duration(*p) * time.Millisecond
	}
	rc := redisstore.Config{
		Host:                   deref(c.Host),
		Database:               int(c.Database),
		Username:               deref(c.Username),
		Password:               deref(c.Password),
		SSL:                    c.SSL,
		SSLVerify:              c.SSLVerify,
		ServerName:             deref(c.ServerName),
		ConnectTimeout:         ms(c.ConnectTimeout),
		SendTimeout:            ms(c.SendTimeout),
		ReadTimeout:            ms(c.ReadTimeout),
		PoolSize:               int(c.KeepalivePoolSize),
		SentinelMaster:         deref(c.SentinelMaster),
		SentinelRole:           deref(c.SentinelRole),
		SentinelUsername:       deref(c.SentinelUsername),
		SentinelPassword:       deref(c.SentinelPassword),
		ClusterMaxRedirections: int(c.ClusterMaxRedirections),
	}
	if c.Port != nil {
		rc.Port = int(*c.Port)
	}
	for _, n := range c.SentinelNodes {
		rc.SentinelNodes = append(rc.SentinelNodes, redisstore.Addr{Host: n.Host, Port: int(n.Port)})
	}
	for _, n := range c.ClusterNodes {
		rc.ClusterNodes = append(rc.ClusterNodes, redisstore.Addr{Host: n.IP, Port: int(n.Port)})
	}
	rc.CloudAuth = c.CloudAuthentication.redisstore()
	return rc
}
