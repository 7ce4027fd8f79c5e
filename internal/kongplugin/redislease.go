package kongplugin

import (
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// RedisLeaseStore is the default Options.NewRedisLeaseStore: a
// ratelimit/redisstore store of one namespace, on its own client, with
// Kong's defaults for unset Redis fields. Leases are one sorted set per key
// in Redis, shared by every node; when Redis fails the store decides
// locally until it answers again.
func RedisLeaseStore(namespace string, r RedisConf) (ratelimit.LeaseStore, error) {
	cfg := redisstore.Config{
		Host:                   str(r.Host),
		Port:                   num(r.Port),
		Database:               num(r.Database),
		Username:               str(r.Username),
		Password:               str(r.Password),
		SSL:                    flag(r.SSL),
		SSLVerify:              flag(r.SSLVerify),
		ServerName:             str(r.ServerName),
		ConnectTimeout:         ms(r.ConnectTimeout, r.Timeout),
		SendTimeout:            ms(r.SendTimeout, r.Timeout),
		ReadTimeout:            ms(r.ReadTimeout, r.Timeout),
		PoolSize:               num(r.KeepalivePoolSize),
		SentinelMaster:         str(r.SentinelMaster),
		SentinelRole:           str(r.SentinelRole),
		SentinelUsername:       str(r.SentinelUsername),
		SentinelPassword:       str(r.SentinelPassword),
		ClusterMaxRedirections: num(r.ClusterMaxRedirections),
	}
	for _, n := range r.SentinelNodes {
		cfg.SentinelNodes = append(cfg.SentinelNodes, redisstore.Addr{Host: str(n.Host), Port: num(n.Port)})
	}
	for _, n := range r.ClusterNodes {
		cfg.ClusterNodes = append(cfg.ClusterNodes, redisstore.Addr{Host: str(n.IP), Port: num(n.Port)})
	}
	c, err := redisstore.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("kongplugin: connecting to redis: %w", err)
	}
	s, err := redisstore.New(c, redisstore.Options{Namespace: namespace})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kongplugin: building redis lease store: %w", err)
	}
	return &ownedStore{Store: s, client: c}, nil
}

// ownedStore closes its client with the store.
type ownedStore struct {
	*redisstore.Store
	client *redisstore.Client
}

func (s *ownedStore) Close() error {
	err := s.Store.Close()
	s.client.Close()
	return err
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func num(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func flag(p *bool) bool { return p != nil && *p }

// ms converts a timeout in milliseconds; the deprecated timeout field
// fills the ones left unset.
func ms(p, fallback *int) time.Duration {
	if p == nil {
		p = fallback
	}
	if p == nil {
		return 0
	}
	return time.Duration(*p) * time.Millisecond
}
