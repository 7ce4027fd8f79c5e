package kongplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/Kong/go-pdk"

	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
)

// ConcurrencyPriority runs sluice-concurrency right after the rate limiters
// (910): a request that is over its rate never takes a connection slot.
const ConcurrencyPriority = policy.PriorityConcurrency

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
	pol       *policy.Concurrency
	sharedKey string
	// ttl is the lease TTL: how long the store stays open after the
	// config is evicted from the cache, for leases still to be released.
	ttl time.Duration
	ns  string // the lease namespace: the kind of repeated errors
}

// leaseTTL is the lease TTL of pc, as policy.ConcurrencyConfig defaults it.
func leaseTTL(pc *policy.ConcurrencyConfig) time.Duration {
	if pc.LeaseTTL == nil {
		return time.Minute
	}
	return time.Duration(*pc.LeaseTTL * float64(time.Second))
}

func (c *ConcurrencyConfig) compiled() (*concCompiled, func(), error) {
	return c.comp.get(c.p.now, func() (*cacheEntry[*concCompiled], error) { return c.p.compileConcurrency(c) })
}

func (p *Process) compileConcurrency(c *ConcurrencyConfig) (*cacheEntry[*concCompiled], error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("kongplugin: encoding config: %w", err)
	}
	_, sum, err := canonicalJSON(raw)
	if err != nil {
		return nil, err
	}
	return p.conc.get(sum, func() (*concCompiled, error) {
		pc, sharedKey, err := c.policyConfig()
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed {
			return nil, ErrClosed
		}
		pol, err := policy.NewConcurrency(pc, p.registry)
		if err != nil {
			return nil, concErr(err)
		}
		return &concCompiled{pol: pol, sharedKey: sharedKey, ttl: leaseTTL(pc), ns: pc.Namespace}, nil
	})
}

// Validate checks the config as the plugin does on its first request,
// without building its store. The error wraps ErrInvalidConfig and lists
// every problem.
func (c *ConcurrencyConfig) Validate() error {
	pc, _, err := c.policyConfig()
	if err != nil {
		return err
	}
	if err := policy.ValidateConcurrency(pc); err != nil {
		return concErr(err)
	}
	return nil
}

// policyConfig translates the config for policy.Concurrency, which holds
// the rules; Kong's config.redis is read by policy.ParseRedis.
func (c *ConcurrencyConfig) policyConfig() (*policy.ConcurrencyConfig, string, error) {
	pc := &policy.ConcurrencyConfig{LeaseTTL: c.LeaseTTL, HeaderName: deref(c.HeaderName),
		Namespace: deref(c.Namespace), Strategy: deref(c.Strategy), ErrorMessage: c.ErrorMessage,
		HideClientHeaders: c.HideClientHeaders != nil && *c.HideClientHeaders}
	if c.Limit != nil {
		pc.Limit = ptr(int64(*c.Limit))
	}
	if c.ErrorCode != nil {
		pc.ErrorCode = ptr(int64(*c.ErrorCode))
	}
	if pc.Identifier = deref(c.Identifier); pc.Identifier == "shared" {
		pc.Identifier = "dimension"
	}
	if c.Strategy != nil && *c.Strategy == "redis" {
		if c.Redis == nil {
			return nil, "", &configError{"sluice-concurrency", []field.Error{{Path: "config.redis", Message: "No redis config provided"}}}
		}
		raw, err := withoutNulls(c.Redis)
		if err != nil {
			return nil, "", err
		}
		if pc.Redis, err = policy.ParseRedis(raw); err != nil {
			return nil, "", concErr(err)
		}
	}
	sharedKey := DefaultSharedKey
	if c.SharedKey != nil && *c.SharedKey != "" {
		sharedKey = *c.SharedKey
	}
	return pc, sharedKey, nil
}

// concErr returns a policy error as the plugin's config error, which
// wraps ErrInvalidConfig; other errors (a store that cannot be built) are
// wrapped as they are.
func concErr(err error) error {
	if _, ok := field.Of(err); !ok {
		return fmt.Errorf("kongplugin: sluice-concurrency: %w", err)
	}
	return &configError{"sluice-concurrency", appendErr(nil, "", err)}
}

// withoutNulls encodes v without its null members, so that Kong's unset
// fields keep their defaults.
func withoutNulls(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("kongplugin: encoding redis config: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("kongplugin: encoding redis config: %w", err)
	}
	for k, x := range m {
		if x == nil {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}

func ptr[T any](v T) *T { return &v }

// Access acquires a lease for the request's key. PDK round trips: the
// identity (one for ip, one to three for consumer with its fallbacks, one
// for the shared key plus the fallback), then one SetHeaders and one
// SetShared carrying the lease to the log phase, or one Exit when the
// limit is reached.
func (c *ConcurrencyConfig) Access(kong *pdk.PDK) {
	cc, done, err := c.compiled()
	if err != nil {
		failConfig(kong, err)
		return
	}
	defer done()
	var req policy.Request
	if err := c.identify(kong, cc, &req); err != nil {
		_ = kong.Log.Err("sluice-concurrency: reading identity: ", err.Error())
		return
	}
	req.Now = c.p.now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := cc.pol.Acquire(ctx, &req)
	if err != nil {
		// Fail open, as Kong's limiters do when their store is down.
		c.p.logRepeated(kong, "err", "lease "+cc.ns, "sluice-concurrency: acquiring lease: "+err.Error())
		return
	}
	h := make(map[string][]string, len(res.Headers))
	for _, x := range res.Headers {
		h[x.Name] = []string{x.Value}
	}
	if !res.Allowed {
		kong.Response.Exit(res.Status, res.Body, h)
		return
	}
	if len(h) > 0 {
		if err := kong.Response.SetHeaders(h); err != nil {
			_ = kong.Log.Err("sluice-concurrency: setting headers: ", err.Error())
		}
	}
	if err := kong.Ctx.SetShared(LeaseSharedKey, map[string]any{"key": res.Lease.Key, "id": res.Lease.ID}); err != nil {
		// Without the shared entry the log phase cannot release: give the
		// slot back now rather than hold it for the TTL.
		_ = kong.Log.Err("sluice-concurrency: storing lease: ", err.Error())
		_ = cc.pol.Release(ctx, res.Lease)
	}
}

// Log releases the request's lease: one PDK round trip to read it.
func (c *ConcurrencyConfig) Log(kong *pdk.PDK) {
	cc, done, err := c.compiled()
	if err != nil {
		return
	}
	defer done()
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
	if err := cc.pol.Release(ctx, policy.Lease{Key: key, ID: id}); err != nil {
		_ = kong.Log.Err("sluice-concurrency: releasing lease: ", err.Error())
	}
}

// identify reads what the identifier needs into req, falling back to the
// forwarded IP when the value is missing.
func (c *ConcurrencyConfig) identify(kong *pdk.PDK, cc *concCompiled, req *policy.Request) error {
	var err error
	switch id := deref(c.Identifier); id {
	case "consumer":
		cons, cerr := kong.Client.GetConsumer()
		if err = cerr; err == nil {
			req.Consumer.ID = cons.Id
			if cons.Id == "" {
				cred, cerr := kong.Client.GetCredential()
				req.CredentialID, err = cred.Id, cerr
			}
		}
	case "credential":
		cred, cerr := kong.Client.GetCredential()
		req.CredentialID, err = cred.Id, cerr
	case "service":
		s, serr := kong.Router.GetService()
		req.ServiceID, err = s.Id, serr
	case "route":
		r, rerr := kong.Router.GetRoute()
		req.RouteID, err = r.Id, rerr
	case "header":
		var v string
		v, err = kong.Request.GetHeader(deref(c.HeaderName))
		req.Header = func(string) string { return v }
	case "dimension", "shared":
		var sv any
		if sv, err = kong.Ctx.GetSharedAny(cc.sharedKey); err == nil {
			var rec sharedRecord
			rec, err = decodeShared(sv)
			req.Dimension = rec.Key
		}
	}
	if err != nil {
		return err
	}
	if cc.pol.Key(req) != ratelimit.Key("ip", "") {
		return nil // the identifier has a value: no IP needed
	}
	req.ClientIP, err = kong.Client.GetForwardedIp()
	return err
}
