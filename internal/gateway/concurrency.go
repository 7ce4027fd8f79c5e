package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// concurrencyConfig is the config of sluice-concurrency, the same fields
// as the Kong plugin of that name (internal/kongplugin), with "dimension"
// in place of "shared" as the identifier fed by sluice-dimensions.
type concurrencyConfig struct {
	// Limit is the number of requests in flight per key; required, > 0.
	Limit *int64 `json:"limit"`
	// LeaseTTL is the backstop lifetime of a lease in seconds (default 60):
	// a lease that is never released (a crashed node) lapses after it.
	LeaseTTL *float64 `json:"lease_ttl"`
	// Identifier is ip (default), consumer, credential, service, route,
	// header (HeaderName) or dimension; a missing value falls back to ip.
	Identifier string `json:"identifier"`
	HeaderName string `json:"header_name"`
	Namespace  string `json:"namespace"`
	// Strategy is local (default: leases in this gateway's memory) or
	// redis (config.redis: leases shared by every gateway on that Redis).
	Strategy     string          `json:"strategy"`
	Redis        *leaseRedisConf `json:"redis"`
	ErrorCode    *int            `json:"error_code"`
	ErrorMessage *string         `json:"error_message"`
	// HideClientHeaders drops X-Concurrency-Limit, X-Concurrency-Remaining
	// and Retry-After.
	HideClientHeaders bool `json:"hide_client_headers"`
}

// leaseRedisConf is the Redis of strategy redis, with Kong's field names
// (a subset of rate-limiting-advanced's config.redis).
type leaseRedisConf struct {
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Database   int    `json:"database"`
	Username   string `json:"username"`
	Password   string `json:"password"`
	SSL        bool   `json:"ssl"`
	SSLVerify  bool   `json:"ssl_verify"`
	ServerName string `json:"server_name"`
	// Timeout is in milliseconds (default 2000).
	Timeout int `json:"timeout"`
}

// ownedLeaseStore closes its Redis client with the store.
type ownedLeaseStore struct {
	*redisstore.Store
	client *redisstore.Client
}

func (s *ownedLeaseStore) Close() error {
	err := s.Store.Close()
	s.client.Close()
	return err
}

// concurrency is the sluice-concurrency plugin: at most Limit requests in
// flight per key. The lease taken in the access phase is released when
// the response has been sent or the client went away (the log phase); its
// TTL is the backstop.
type concurrency struct {
	store      ratelimit.LeaseStore
	max        int64
	ttl        time.Duration
	ident      string
	headerName string
	status     int
	body       []byte
	hide       bool
	limitStr   string
}

// leaseSeq numbers lease ids; leasePrefix makes them unique across the
// gateways sharing a Redis.
var (
	leaseSeq    atomic.Uint64
	leasePrefix = func() string {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
		return hex.EncodeToString(b) + "-"
	}()
)

func newConcurrency(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c concurrencyConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	add := func(path, msg string) { errs = append(errs, field.Error{Path: path, Message: msg}) }
	p := &concurrency{ttl: time.Minute, ident: c.Identifier, status: 429,
		body: kongErrorBody("Too many concurrent requests", ""), hide: c.HideClientHeaders}
	switch {
	case c.Limit == nil:
		add("config.limit", "required field missing")
	case *c.Limit <= 0:
		add("config.limit", "value must be greater than 0")
	default:
		p.max = *c.Limit
		p.limitStr = strconv.FormatInt(p.max, 10)
	}
	if c.LeaseTTL != nil {
		ms := *c.LeaseTTL * 1000
		if ms < 1 || ms != math.Trunc(ms) || *c.LeaseTTL > 86400 {
			add("config.lease_ttl", "expected a whole number of milliseconds between 0.001 and 86400 seconds")
		} else {
			p.ttl = time.Duration(ms) * time.Millisecond
		}
	}
	if p.ident == "" {
		p.ident = "ip"
	}
	switch p.ident {
	case "ip", "consumer", "credential", "service", "route", "dimension":
	case "header":
		if c.HeaderName == "" {
			add("config.header_name", "No header name provided")
		}
		p.headerName = c.HeaderName
	default:
		add("config.identifier", "expected one of: ip, consumer, credential, service, route, header, dimension")
	}
	switch c.Strategy {
	case "", "local":
		if c.Redis != nil {
			add("config.redis", "only used with strategy redis")
		}
	case "redis":
		switch {
		case c.Redis == nil || c.Redis.Host == "":
			add("config.redis.host", "required with strategy redis")
		case c.Redis.Port < 0 || c.Redis.Port > 65535:
			add("config.redis.port", "expected a port between 0 and 65535")
		case c.Redis.Timeout < 0:
			add("config.redis.timeout", "must not be negative")
		}
	default:
		add("config.strategy", "expected one of: local, redis")
	}
	if c.ErrorCode != nil {
		if *c.ErrorCode < 100 || *c.ErrorCode > 599 {
			add("config.error_code", "expected an HTTP status between 100 and 599")
		} else {
			p.status = *c.ErrorCode
		}
	}
	if c.ErrorMessage != nil {
		p.body = kongErrorBody(*c.ErrorMessage, "")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	ns := c.Namespace
	if ns == "" {
		ns = "sluice-concurrency"
	}
	key, create := "concurrency|local|"+ns, func() (io.Closer, error) {
		return memorystore.New(memorystore.Options{}), nil
	}
	if c.Strategy == "redis" {
		r := *c.Redis
		fp, _ := json.Marshal(r) // plain data always marshals
		key = "concurrency|redis|" + ns + "|" + string(fp)
		create = func() (io.Closer, error) { return dialLeaseStore(ns, r) }
	}
	s, err := env.Shared.Value(key, create)
	if err != nil {
		return nil, fmt.Errorf("gateway: lease store: %w", err)
	}
	p.store = s.(ratelimit.LeaseStore)
	return p, nil
}

// dialLeaseStore builds a Redis lease store of one namespace on its own
// client. A config the client rejects is an error; a Redis that does not
// answer is not: leases are then kept locally, and a goroutine owned by
// the store dials again every second until Redis answers.
func dialLeaseStore(ns string, r leaseRedisConf) (io.Closer, error) {
	port := r.Port
	if port == 0 {
		port = 6379
	}
	timeout := time.Duration(r.Timeout) * time.Millisecond
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	cfg := redisstore.Config{
		Host: r.Host, Port: port, Database: r.Database, Username: r.Username, Password: r.Password,
		SSL: r.SSL, SSLVerify: r.SSLVerify, ServerName: r.ServerName,
		ConnectTimeout: timeout, SendTimeout: timeout, ReadTimeout: timeout,
	}
	s, err := openLeaseStore(ns, cfg)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, redisstore.ErrConfig):
		return nil, err
	}
	d := &redialingLeaseStore{local: memorystore.New(memorystore.Options{}), stop: make(chan struct{}), done: make(chan struct{})}
	go d.loop(ns, cfg)
	return d, nil
}

func openLeaseStore(ns string, cfg redisstore.Config) (*ownedLeaseStore, error) {
	c, err := redisstore.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to redis: %w", err)
	}
	s, err := redisstore.New(c, redisstore.Options{Namespace: ns})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("building the redis lease store: %w", err)
	}
	return &ownedLeaseStore{Store: s, client: c}, nil
}

// redialingLeaseStore keeps leases locally until Redis answers, then in
// Redis for good.
type redialingLeaseStore struct {
	local *memorystore.Store
	redis atomic.Pointer[ownedLeaseStore]
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func (d *redialingLeaseStore) loop(ns string, cfg redisstore.Config) {
	defer close(d.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		if s, err := openLeaseStore(ns, cfg); err == nil {
			d.redis.Store(s)
			return
		}
	}
}

func (d *redialingLeaseStore) current() ratelimit.LeaseStore {
	if s := d.redis.Load(); s != nil {
		return s
	}
	return d.local
}

func (d *redialingLeaseStore) Acquire(ctx context.Context, r ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	return d.current().Acquire(ctx, r)
}

// Release releases in both stores: a lease taken before Redis answered
// lives in the local one.
func (d *redialingLeaseStore) Release(ctx context.Context, key, id string) error {
	err := d.local.Release(ctx, key, id)
	if s := d.redis.Load(); s != nil {
		err = errors.Join(err, s.Release(ctx, key, id))
	}
	return err
}

// Close stops the dialling goroutine and closes both stores.
func (d *redialingLeaseStore) Close() error {
	var err error
	d.once.Do(func() {
		close(d.stop)
		<-d.done
		err = d.local.Close()
		if s := d.redis.Load(); s != nil {
			err = errors.Join(err, s.Close())
		}
	})
	return err
}

var _ ratelimit.LeaseStore = (*redialingLeaseStore)(nil)

func (p *concurrency) key(x *Exchange) string {
	v := ""
	switch p.ident {
	case "consumer":
		if x.Consumer != nil {
			v = x.Consumer.ID
		} else {
			v = x.Credential
		}
	case "credential":
		v = x.Credential
	case "service":
		if x.Service != nil {
			v = x.Service.ID
		}
	case "route":
		if x.Route != nil {
			v = x.Route.ID
		}
	case "header":
		v = x.Header(p.headerName)
	case "dimension":
		v = x.Identifier
	}
	if v == "" {
		return ratelimit.Key("ip", x.clientIP())
	}
	return ratelimit.Key(p.ident, v)
}

func (p *concurrency) Access(x *Exchange) error {
	key := p.key(x)
	id := leasePrefix + strconv.FormatUint(leaseSeq.Add(1), 36)
	l, err := p.store.Acquire(x.Context, ratelimit.LeaseRequest{Key: key, ID: id, Max: p.max, TTL: p.ttl, Now: x.Now})
	if err != nil {
		// Fail open, as the rate limiters do when their store fails.
		x.StoreError("sluice-concurrency", err)
		x.Outcome("sluice-concurrency", "store_error")
		return nil
	}
	if !p.hide {
		x.SetResponseHeader("X-Concurrency-Limit", p.limitStr)
		x.SetResponseHeader("X-Concurrency-Remaining", strconv.FormatInt(l.Remaining, 10))
	}
	if !l.Allowed {
		if !p.hide {
			secs := int64(math.Ceil(l.RetryAfter.Seconds()))
			x.SetResponseHeader("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		}
		x.Respond(p.status, jsonType, p.body)
		x.Outcome("sluice-concurrency", "denied")
		return nil
	}
	x.OnEnd(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.store.Release(ctx, key, id) // on failure the TTL frees the slot
	})
	x.Outcome("sluice-concurrency", "allowed")
	return nil
}
