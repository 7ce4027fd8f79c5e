package kongplugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/Kong/go-pdk"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// ConcurrencyPriority runs sluice-concurrency right after the rate limiters
// (910): a request that is over its rate never takes a connection slot.
const ConcurrencyPriority = 905

// LeaseSharedKey is the kong.ctx.shared entry that carries a granted lease
// from the access phase to the log phase of the same request:
// {"key": "<counted key>", "id": "<lease id>"}.
const LeaseSharedKey = "sluice_lease"

// ConcurrencyConfig is the config of sluice-concurrency, which bounds the
// number of requests in flight per key, for long-poll and streaming
// endpoints: a lease is acquired in the access phase, released in the log
// phase, and lapses after LeaseTTL if the log phase never runs (a crashed
// node, a lost connection). With strategy redis the leases of all Kong
// nodes are one sorted set per key in Redis.
type ConcurrencyConfig struct {
	// Limit is the number of requests in flight per key; required, > 0.
	Limit *int `json:"limit"`
	// LeaseTTL is the backstop lifetime of a lease in seconds; default 60
	// (Kong's default proxy read timeout). Set it above the longest
	// request the route serves.
	LeaseTTL *float64 `json:"lease_ttl"`
	// Identifier is what is counted: "ip" (default), "consumer",
	// "credential", "service", "route", "header" (HeaderName) or
	// "dimension" (the key of the sluice-dimensions entry in
	// kong.ctx.shared; "shared" is accepted as an alias). The names are the
	// sluice gateway's, so one decK file serves both. A missing value falls
	// back to the IP, as in Kong's rate limiters.
	Identifier *string `json:"identifier"`
	HeaderName *string `json:"header_name"`
	// SharedKey names the kong.ctx.shared entry of the "dimension" identifier;
	// null means DefaultSharedKey.
	SharedKey *string `json:"shared_key"`
	// Namespace separates the counters of unrelated configs; default
	// "sluice-concurrency". Instances with one namespace share leases.
	Namespace *string `json:"namespace"`
	// Strategy is "local" (default: leases in this node's memory) or
	// "redis" (config.redis, shared by all nodes).
	Strategy *string    `json:"strategy"`
	Redis    *RedisConf `json:"redis"`
	// ErrorCode and ErrorMessage make the rejection: default 429 and
	// "Too many concurrent requests".
	ErrorCode    *int    `json:"error_code"`
	ErrorMessage *string `json:"error_message"`
	// HideClientHeaders drops X-Concurrency-Limit, X-Concurrency-Remaining
	// and Retry-After from rejections.
	HideClientHeaders *bool `json:"hide_client_headers"`

	p    *Process
	comp lazy[*concCompiled]
}

// NewConcurrency is the go-pdk constructor of sluice-concurrency instances.
func (p *Process) NewConcurrency() any { return &ConcurrencyConfig{p: p} }

type concCompiled struct {
	store      ratelimit.LeaseStore
	max        int64
	ttl        time.Duration
	ident      string
	headerName string
	sharedKey  string
	status     int
	body       []byte
	hide       bool
}

// leaseStore is one namespace's store, shared by every config that names
// it.
type leaseStore struct {
	store ratelimit.LeaseStore
}

// leaseID returns an id unique to this process and call: a random
// per-process prefix keeps the ids of processes sharing a Redis apart.
func (p *Process) leaseID() string {
	return p.leasePrefix + strconv.FormatUint(p.leaseSeq.Add(1), 10)
}

func randomPrefix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b) + "-"
}

func (c *ConcurrencyConfig) compiled() (*concCompiled, error) {
	return c.comp.get(c.p.now, func() (*concCompiled, error) { return c.p.compileConcurrency(c) })
}

func (p *Process) compileConcurrency(c *ConcurrencyConfig) (*concCompiled, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("kongplugin: encoding config: %w", err)
	}
	_, sum, err := canonicalJSON(raw)
	if err != nil {
		return nil, err
	}
	return p.conc.get(sum, func() (*concCompiled, error) {
		cc, ns, strategy, errs := c.check()
		if len(errs) == 0 {
			s, err := p.leaseStoreFor(ns, strategy, c.Redis)
			if err != nil {
				errs = append(errs, err.Error())
			}
			cc.store = s
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("%w: sluice-concurrency: %s", ErrInvalidConfig, joinErrs(errs))
		}
		return cc, nil
	})
}

// Validate checks the config as the plugin does on its first request,
// without building its store. The error wraps ErrInvalidConfig and lists
// every problem.
func (c *ConcurrencyConfig) Validate() error {
	if _, _, _, errs := c.check(); len(errs) > 0 {
		return fmt.Errorf("%w: sluice-concurrency: %s", ErrInvalidConfig, joinErrs(errs))
	}
	return nil
}

// check validates and defaults every field but the store.
func (c *ConcurrencyConfig) check() (cc *concCompiled, ns, strategy string, errs []string) {
	cc = &concCompiled{ttl: time.Minute, ident: "ip", sharedKey: DefaultSharedKey,
		status: 429, body: messageJSON("Too many concurrent requests")}
	if c.Limit == nil {
		errs = append(errs, "limit: required field missing")
	} else if *c.Limit <= 0 {
		errs = append(errs, "limit: value must be greater than 0")
	} else {
		cc.max = int64(*c.Limit)
	}
	if c.LeaseTTL != nil {
		ms := *c.LeaseTTL * 1000
		if ms < 1 || ms != math.Trunc(ms) || *c.LeaseTTL > 86400 {
			errs = append(errs, "lease_ttl: expected a whole number of milliseconds between 0.001 and 86400 seconds")
		} else {
			cc.ttl = time.Duration(ms) * time.Millisecond
		}
	}
	if c.Identifier != nil {
		cc.ident = *c.Identifier
	}
	if cc.ident == "shared" {
		cc.ident = "dimension"
	}
	switch cc.ident {
	case "ip", "consumer", "credential", "service", "route", "dimension":
	case "header":
		if c.HeaderName == nil || *c.HeaderName == "" {
			errs = append(errs, "header_name: No header name provided")
		} else {
			cc.headerName = *c.HeaderName
		}
	default:
		errs = append(errs, "identifier: expected one of: ip, consumer, credential, service, route, header, dimension")
	}
	if c.SharedKey != nil && *c.SharedKey != "" {
		cc.sharedKey = *c.SharedKey
	}
	if c.ErrorCode != nil {
		if *c.ErrorCode < 100 || *c.ErrorCode > 599 {
			errs = append(errs, "error_code: expected an HTTP status between 100 and 599")
		} else {
			cc.status = *c.ErrorCode
		}
	}
	if c.ErrorMessage != nil {
		cc.body = messageJSON(*c.ErrorMessage)
	}
	cc.hide = c.HideClientHeaders != nil && *c.HideClientHeaders
	ns = "sluice-concurrency"
	if c.Namespace != nil && *c.Namespace != "" {
		ns = *c.Namespace
	}
	strategy = "local"
	if c.Strategy != nil {
		strategy = *c.Strategy
	}
	switch strategy {
	case "local":
	case "redis":
		if c.Redis == nil {
			errs = append(errs, "redis: No redis config provided")
		}
	default:
		errs = append(errs, "strategy: expected one of: local, redis")
	}
	return cc, ns, strategy, errs
}

// leaseStoreFor returns the process-level store of a namespace.
func (p *Process) leaseStoreFor(ns, strategy string, redis *RedisConf) (ratelimit.LeaseStore, error) {
	key := strategy + "|" + ns
	if strategy == "redis" {
		fp, err := json.Marshal(redis)
		if err != nil {
			return nil, fmt.Errorf("kongplugin: encoding redis config: %w", err)
		}
		key += "|" + string(fp)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if l, ok := p.leases[key]; ok {
		return l.store, nil
	}
	var s ratelimit.LeaseStore
	switch strategy {
	case "local":
		s = memorystore.New(memorystore.Options{})
	case "redis":
		if redis == nil {
			return nil, fmt.Errorf("redis: No redis config provided")
		}
		if p.newRedis == nil {
			return nil, fmt.Errorf("strategy: this plugin server has no Redis support")
		}
		var err error
		if s, err = p.newRedis(ns, *redis); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
	default:
		return nil, fmt.Errorf("strategy: expected one of: local, redis")
	}
	p.leases[key] = &leaseStore{store: s}
	return s, nil
}

func messageJSON(msg string) []byte {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg}) // a struct of one string always marshals
	return b
}

// Access acquires a lease for the request's key. PDK round trips: the
// identity (one for ip, one to three for consumer with its fallbacks, one
// for the shared key plus the fallback), then one SetShared carrying the
// lease to the log phase, or one Exit when the limit is reached.
func (c *ConcurrencyConfig) Access(kong *pdk.PDK) {
	cc, err := c.compiled()
	if err != nil {
		failConfig(kong, err)
		return
	}
	key, err := c.key(kong, cc)
	if err != nil {
		_ = kong.Log.Err("sluice-concurrency: reading identity: ", err.Error())
		return
	}
	id := c.p.leaseID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := cc.store.Acquire(ctx, ratelimit.LeaseRequest{Key: key, ID: id, Max: cc.max, TTL: cc.ttl, Now: c.p.now()})
	if err != nil {
		// Fail open, as Kong's limiters do when their store is down.
		_ = kong.Log.Err("sluice-concurrency: acquiring lease: ", err.Error())
		return
	}
	if !l.Allowed {
		h := map[string][]string{"Content-Type": {"application/json; charset=utf-8"}}
		if !cc.hide {
			h["X-Concurrency-Limit"] = []string{strconv.FormatInt(cc.max, 10)}
			h["X-Concurrency-Remaining"] = []string{"0"}
			h["Retry-After"] = []string{strconv.FormatInt(int64(math.Ceil(l.RetryAfter.Seconds())), 10)}
		}
		kong.Response.Exit(cc.status, cc.body, h)
		return
	}
	if err := kong.Ctx.SetShared(LeaseSharedKey, map[string]any{"key": key, "id": id}); err != nil {
		// Without the shared entry the log phase cannot release: give the
		// slot back now rather than hold it for the TTL.
		_ = kong.Log.Err("sluice-concurrency: storing lease: ", err.Error())
		_ = cc.store.Release(ctx, key, id)
	}
}

// Log releases the request's lease: one PDK round trip to read it.
func (c *ConcurrencyConfig) Log(kong *pdk.PDK) {
	cc, err := c.compiled()
	if err != nil {
		return
	}
	v, err := kong.Ctx.GetSharedAny(LeaseSharedKey)
	if err != nil || v == nil {
		return
	}
	m, _ := v.(map[string]any)
	key, _ := m["key"].(string)
	id, _ := m["id"].(string)
	if id == "" {
		_ = kong.Log.Err("sluice-concurrency: ", LeaseSharedKey, " holds no lease id")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cc.store.Release(ctx, key, id); err != nil {
		_ = kong.Log.Err("sluice-concurrency: releasing lease: ", err.Error())
	}
}

// key reads the counted key, falling back to the forwarded IP.
func (c *ConcurrencyConfig) key(kong *pdk.PDK, cc *concCompiled) (string, error) {
	var v string
	var err error
	switch cc.ident {
	case "consumer":
		cons, cerr := kong.Client.GetConsumer()
		if err = cerr; err == nil {
			v = cons.Id
			if v == "" {
				cred, cerr := kong.Client.GetCredential()
				v, err = cred.Id, cerr
			}
		}
	case "credential":
		cred, cerr := kong.Client.GetCredential()
		v, err = cred.Id, cerr
	case "service":
		s, serr := kong.Router.GetService()
		v, err = s.Id, serr
	case "route":
		r, rerr := kong.Router.GetRoute()
		v, err = r.Id, rerr
	case "header":
		v, err = kong.Request.GetHeader(cc.headerName)
	case "dimension":
		var sv any
		if sv, err = kong.Ctx.GetSharedAny(cc.sharedKey); err == nil {
			var rec sharedRecord
			rec, err = decodeShared(sv)
			v = rec.Key
		}
	}
	if err != nil {
		return "", err
	}
	if v != "" {
		return cc.ident + ":" + v, nil
	}
	ip, err := kong.Client.GetForwardedIp()
	return "ip:" + ip, err
}
