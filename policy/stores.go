package policy

import (
	"encoding/json"
	"sync"
	"time"

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

// redisHealth follows whether one default Redis store counts locally,
// for RegistryOptions.OnRedisState.
type redisHealth struct {
	r  *Registry
	ns string

	mu       sync.Mutex
	degraded bool
	reason   string // of the fault that degraded it, "" for none
	closed   bool
	since    time.Time    // of the last change of degraded
	target   *RedisTarget // the Redis it counts in
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
// shared by its Redis config; its entry follows the store's health and
// gives the client back once the store is closed. Called with r.mu held
// (from acquire).
//
// A config the client rejects is an error. A Redis that does not answer
// is not: the store connects on its first call and, while Redis is down,
// the namespace counts locally, as Kong does.
func (r *Registry) newDefaultRedisStore(cfg RedisStoreConfig) (*storeEntry, error) {
	fp := redisFingerprint(&cfg.Redis)
	rc, ok := r.clients[fp]
	if !ok {
		c, err := redisstore.NewClient(r.redisConfig(&cfg.Redis))
		if err != nil {
			return nil, err
		}
		rc = &redisClient{c: c}
		r.clients[fp] = rc
	}
	syncRate := redisstore.LocalOnly
	if cfg.SyncRate >= 0 {
		syncRate = time.Duration(cfg.SyncRate * float64(time.Second))
	}
	health := &redisHealth{r: r, ns: cfg.Namespace, since: time.Now(), target: targetOf(&cfg.Redis)}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = r.opts.RedisTimeout
	}
	st, err := redisstore.New(rc.c, redisstore.Options{
		Namespace:   cfg.Namespace,
		SyncRate:    syncRate,
		CallerClock: r.opts.RedisCallerClock || cfg.CallerClock,
		KongLayout:  cfg.KongLayout,
		Timeout:     timeout,
		Strict:      cfg.Strict,
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
	return &storeEntry{store: st, health: health, release: func() {
		health.close()
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

// redisstoreConfig maps Kong's Redis record onto the store's config: the
// one place where config.redis becomes a redisstore.Config, for every
// plugin and adapter.
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
