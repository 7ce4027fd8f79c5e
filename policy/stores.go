package policy

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// newDefaultLocalStore returns an in-process store for one namespace.
func newDefaultLocalStore(string) (ratelimit.Store, error) {
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
	release func()
}

func (s sharedRedisStore) Close() error {
	err := s.Store.Close()
	s.release()
	return err
}

// newDefaultRedisStore builds a namespace's Redis store over the client
// shared by its Redis config, dialling it on first use. Called with r.mu
// held (from acquire).
func (r *Registry) newDefaultRedisStore(cfg RedisStoreConfig) (ratelimit.Store, error) {
	if cfg.Redis.CloudAuthentication != nil && cfg.Redis.CloudAuthentication.AuthProvider != nil {
		return nil, fmt.Errorf("%w: redis cloud_authentication is not supported", ErrStrategyUnavailable)
	}
	fp := redisFingerprint(&cfg.Redis)
	rc, ok := r.clients[fp]
	if !ok {
		rcfg := redisstoreConfig(&cfg.Redis)
		rcfg.TLSConfig = r.opts.RedisTLS
		c, err := redisstore.Dial(rcfg)
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
	st, err := redisstore.New(rc.c, redisstore.Options{
		Namespace:   cfg.Namespace,
		SyncRate:    syncRate,
		CallerClock: r.opts.RedisCallerClock || cfg.CallerClock,
		Logger:      r.opts.Logger,
	})
	if err != nil {
		if rc.refs == 0 {
			rc.c.Close()
			delete(r.clients, fp)
		}
		return nil, err
	}
	rc.refs++
	return sharedRedisStore{Store: st, release: func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		rc.refs--
		if rc.refs == 0 {
			rc.c.Close()
			delete(r.clients, fp)
		}
	}}, nil
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
	return rc
}
